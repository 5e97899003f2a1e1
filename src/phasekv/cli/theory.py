"""``phasekv theory``: check the idealized theory numerically (Theorems 1 and 2, and a sweep).

Every command prints its plan and an estimate of its time first, takes ``--dry-run`` and always writes its
result JSON (``--out``, by default ``theory/COMMAND.json``; written atomically), which records every
parameter. ``theorem2`` also writes the concentration trajectories as a PNG beside it.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from phasekv.cli.errors import one_line_errors
from phasekv.cli.options import FieldGroup, expand_groups
from phasekv.cli.planned import DRY_RUN, run_planned
from phasekv.files import check_output, write_text_atomic
from phasekv.studies.theory.options import QUICK_SWEEP, TheoryOptions

app = typer.Typer(help="The idealized induction model: optimal and learned compression.", no_args_is_help=True)

THEORY = TheoryOptions()  # the theorems' defaults; the sweep's are QUICK_SWEEP
GEOMETRY = {  # the fields of `InductionConfig` that the commands set: (type, help)
    "n_tokens": (int, "vocabulary size N"),
    "n_chunks": (int, "chunks per context L"),
    "chunk_size": (int, "positions per chunk S"),
    "n_heads": (int, "heads m (< S)"),
    "gamma": (float, "attention scale"),
    "beta": (float, "unembedding scale"),
    "kappa": (float, "shared inner product of distinct tokens"),
    "eps": (float, "allowed deviation from exact equiangular geometry"),
}


def _geometry(defaults, names=tuple(GEOMETRY)) -> dict:
    """The options of the geometry fields `names`, at their values in `defaults`."""
    return {name: (GEOMETRY[name][0], typer.Option(getattr(defaults, name), help=GEOMETRY[name][1])) for name in names}


def _seed(default: int):
    return typer.Option(default, help="seed for everything random")


def _out(command: str):
    return typer.Option(Path("theory") / f"{command}.json", help="write the result JSON here")


def _check_out(out: Path) -> None:
    """A bad --out fails before the computation (one line, exit code 2)."""
    with one_line_errors("theory"):
        check_output(out)


def _write(result: dict, out: Path) -> None:
    write_text_atomic(out, json.dumps(result, indent=1))
    typer.echo(f"wrote {out}")


def _floats(text: str) -> list[float]:
    return [float(value) for value in text.split(",")]


def _ints(text: str) -> list[int]:
    return [int(value) for value in text.split(",")]


def _print_rows(rows: list[dict], keys: list[str]) -> None:
    def cell(value) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)

    typer.echo("  ".join(f"{key:>10}" for key in keys))
    for row in rows:
        typer.echo("  ".join(f"{cell(row[key]):>10}" for key in keys))


THEOREM1 = FieldGroup(  # the fields of `Theorem1Config` that the command sets
    THEORY.theorem1,
    {
        **_geometry(THEORY.theorem1),
        "n_starts": (int, typer.Option(THEORY.theorem1.n_starts, help="random starts")),
        "n_contexts": (int, typer.Option(THEORY.theorem1.n_contexts, help="Monte Carlo contexts when eps > 0")),
        "steps": (int, typer.Option(THEORY.theorem1.steps, help="Adam steps per start")),
        "lr": (float, typer.Option(THEORY.theorem1.lr, help="Adam learning rate")),
        "seed": (int, _seed(THEORY.theorem1.seed)),
    },
)


@app.command()
@expand_groups
def theorem1(settings: dict = THEOREM1, out: Path = _out("theorem1"), dry_run: bool = DRY_RUN) -> None:
    """Minimise over free query-independent coefficient rules; compare one-hot assignments."""
    _check_out(out)
    from phasekv.theory.theorem1 import run_theorem1

    config = THEOREM1.build(settings)
    result = run_planned(lambda planner: run_theorem1(config, planner), dry_run)
    if result is None:
        return
    summary = result["summary"]
    best = min(result["starts"], key=lambda start: start["loss"])
    typer.echo(
        f"{summary['n_one_hot_value_after_key']}/{summary['n_starts']} starts end one-hot with values one "
        f"after keys, {summary['n_of_those_distinct']} of them on distinct positions; "
        f"best loss {summary['best_loss']:.5f} (smallest largest weight: key "
        f"{best['min_key_weight']:.3f}, value {best['min_value_weight']:.3f})"
    )
    if "assignments" in result:
        _print_rows(result["assignments"]["assignments"], ["positions", "distinct", "loss"])
    _write(result, out)


THEOREM2 = FieldGroup(  # the fields of `GateTrainingConfig` that the command sets
    THEORY.theorem2,
    {
        **_geometry(THEORY.theorem2),
        "rho": (float, typer.Option(THEORY.theorem2.rho, help="radius of the initial ball")),
        "optimizer": (str, typer.Option(THEORY.theorem2.optimizer, help="adam or sgd")),
        "lr": (float, typer.Option(THEORY.theorem2.lr, help="step size")),
        "steps": (int, typer.Option(THEORY.theorem2.steps, help="training steps")),
        "batch_size": (int, typer.Option(THEORY.theorem2.batch_size, help="contexts per step")),
        "seed": (int, _seed(THEORY.theorem2.seed)),
    },
)


@app.command()
@expand_groups
def theorem2(settings: dict = THEOREM2, out: Path = _out("theorem2"), dry_run: bool = DRY_RUN) -> None:
    """Train log-linear gates from a small ball and report how they concentrate."""
    _check_out(out)
    from phasekv.studies.theory.figure import plot_theorem2
    from phasekv.theory.theorem2 import train_gates

    config = THEOREM2.build(settings)
    result = run_planned(lambda planner: train_gates(config, planner), dry_run)
    if result is None:
        return
    final = result["final"]
    heads = [
        {
            "head": head,
            "key_pos": final["selected_positions"][head],
            "value_pos": final["value_peak_positions"][head],
            "key_static": final["key_static"][head],
            "key_window": final["key_per_window"][head],
            "val_static": final["value_static"][head],
            "val_window": final["value_per_window"][head],
            "concentr": final["head_concentrated"][head],
        }
        for head in range(config.n_heads)
    ]
    _print_rows(heads, list(heads[0]))
    by_position = ", ".join(f"{value:.2f}" for value in final["accuracy_by_position"])
    typer.echo(
        f"loss {final['loss']:.4f}  accuracy by position [{by_position}]  "
        f"collisions {final['collisions']}  uncovered positions {final['uncovered_positions']}"
    )
    _write(result, out)
    typer.echo(f"wrote {plot_theorem2(result, out.with_suffix('.png'))}")


def _grid_text(values: list) -> str:
    """A grid's values as its option's text, which `_ints` and `_floats` read back: [4.0, 8.0] -> '4,8'."""
    return ",".join(str(int(v)) if float(v).is_integer() else repr(v) for v in values)


SWEEP_GRID = FieldGroup(  # the grid of `phasekv theory sweep`: the values of every parameter it sweeps
    QUICK_SWEEP.sweep_grid,
    {
        name: (str, typer.Option(_grid_text(QUICK_SWEEP.sweep_grid[name]), help=f"comma-separated {values}"))
        for name, values in (
            ("n_tokens", "N values"),
            ("chunk_size", "S values"),
            ("n_heads", "m values"),
            ("rho", "initial radii"),
            ("gamma", "attention scales"),
            ("beta", "unembedding scales"),
        )
    },
    parsers=dict(n_tokens=_ints, chunk_size=_ints, n_heads=_ints, rho=_floats, gamma=_floats, beta=_floats),
)
SWEEP_SEEDS = FieldGroup(  # the seeds every grid point trains with
    QUICK_SWEEP,
    {
        "sweep_seeds": (
            str,
            typer.Option(",".join(map(str, QUICK_SWEEP.sweep_seeds)), "--seeds", help="comma-separated seeds"),
        )
    },
    parsers=dict(sweep_seeds=lambda text: tuple(_ints(text))),
)
SWEEP_TRAINING = FieldGroup(  # the fields of every grid point's `GateTrainingConfig` that the command sets
    QUICK_SWEEP.sweep,
    {
        **_geometry(QUICK_SWEEP.sweep, ("n_chunks", "kappa", "eps")),
        "steps": (int, typer.Option(QUICK_SWEEP.sweep.steps, help="training steps per run")),
        "batch_size": (int, typer.Option(QUICK_SWEEP.sweep.batch_size, help="contexts per step")),
        "lr": (float, typer.Option(QUICK_SWEEP.sweep.lr, help="Adam step size")),
    },
)


@app.command()
@expand_groups
def sweep(
    grid_values: dict = SWEEP_GRID,
    seed_values: dict = SWEEP_SEEDS,
    training: dict = SWEEP_TRAINING,
    out: Path = _out("sweep"),
    dry_run: bool = DRY_RUN,
) -> None:
    """Theorem 2 over a grid: fraction concentrating, fraction fully covering, final loss (a quick default grid)."""
    _check_out(out)
    grid = SWEEP_GRID.build(grid_values)
    from phasekv.theory.sweep import TABLE_KEYS, run_sweep

    base = SWEEP_TRAINING.build(training)
    seeds = list(SWEEP_SEEDS.build(seed_values).sweep_seeds)
    result = run_planned(lambda planner: run_sweep(base, grid, seeds, planner), dry_run)
    if result is None:
        return
    _print_rows(result["table"], list(grid) + list(TABLE_KEYS))
    _write(result, out)
