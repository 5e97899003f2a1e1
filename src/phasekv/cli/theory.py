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
from phasekv.studies.flags import Flag
from phasekv.studies.theory.options import QUICK_SWEEP, TheoryOptions

app = typer.Typer(help="The idealized induction model: optimal and learned compression.", no_args_is_help=True)

THEORY = TheoryOptions()  # the theorems' defaults; the sweep's are QUICK_SWEEP
GEOMETRY = {  # the fields of `InductionConfig` that the commands set
    "n_tokens": Flag("vocabulary size N"),
    "n_chunks": Flag("chunks per context L"),
    "chunk_size": Flag("positions per chunk S"),
    "n_heads": Flag("heads m (< S)"),
    "gamma": Flag("attention scale"),
    "beta": Flag("unembedding scale"),
    "kappa": Flag("shared inner product of distinct tokens"),
    "eps": Flag("allowed deviation from exact equiangular geometry"),
}
SEED = Flag("seed for everything random")


def _out(command: str):
    return typer.Option(Path("theory") / f"{command}.json", help="write the result JSON here")


def _check_out(out: Path) -> None:
    """A bad --out fails before the computation (one line, exit code 2)."""
    with one_line_errors("theory"):
        check_output(out)


def _run(group: FieldGroup, settings: dict, out: Path, dry_run: bool, work, typed, plot=None) -> None:
    """Build the config from the options (once --out is known to be writable), run `work(config, planner)` under
    its plan (--dry-run: the plan only), print the result as its typed result `typed` reads it, write its JSON to
    --out and its figure `plot(result, path)` beside it."""
    _check_out(out)
    config = group.build(settings)
    result = run_planned(lambda planner: work(config, planner), dry_run)
    if result is None:
        return
    typer.echo(str(typed.from_dict(result)))
    write_text_atomic(out, json.dumps(result, indent=1))
    typer.echo(f"wrote {out}")
    if plot is not None:
        typer.echo(f"wrote {plot(result, out.with_suffix('.png'))}")


def _floats(text: str) -> list[float]:
    return [float(value) for value in text.split(",")]


def _ints(text: str) -> list[int]:
    return [int(value) for value in text.split(",")]


THEOREM1 = FieldGroup(  # the fields of `Theorem1Config` that the command sets
    THEORY.theorem1,
    {
        **GEOMETRY,
        "n_starts": Flag("random starts"),
        "n_contexts": Flag("Monte Carlo contexts when eps > 0"),
        "steps": Flag("Adam steps per start"),
        "lr": Flag("Adam learning rate"),
        "seed": SEED,
    },
)


THEOREM2 = FieldGroup(  # the fields of `GateTrainingConfig` that the command sets
    THEORY.theorem2,
    {
        **GEOMETRY,
        "rho": Flag("radius of the initial ball"),
        "optimizer": Flag("adam or sgd"),
        "lr": Flag("step size"),
        "steps": Flag("training steps"),
        "batch_size": Flag("contexts per step"),
        "seed": SEED,
    },
)


@app.command()
@expand_groups
def theorem1(settings: dict = THEOREM1, out: Path = _out("theorem1"), dry_run: bool = DRY_RUN) -> None:
    """Minimise over free query-independent coefficient rules; compare one-hot assignments."""
    from phasekv.studies.theory.result import Theorem1Result
    from phasekv.theory.theorem1 import run_theorem1

    _run(THEOREM1, settings, out, dry_run, run_theorem1, Theorem1Result)


@app.command()
@expand_groups
def theorem2(settings: dict = THEOREM2, out: Path = _out("theorem2"), dry_run: bool = DRY_RUN) -> None:
    """Train log-linear gates from a small ball and report how they concentrate."""
    from phasekv.studies.theory.figure import plot_theorem2
    from phasekv.studies.theory.result import Theorem2Result
    from phasekv.theory.theorem2 import train_gates

    _run(THEOREM2, settings, out, dry_run, train_gates, Theorem2Result, plot_theorem2)


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
        **{name: GEOMETRY[name] for name in ("n_chunks", "kappa", "eps")},
        "steps": Flag("training steps per run"),
        "batch_size": Flag("contexts per step"),
        "lr": Flag("Adam step size"),
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
    from phasekv.studies.theory.result import SweepResult
    from phasekv.theory.sweep import run_sweep

    grid = SWEEP_GRID.build(grid_values)
    seeds = list(SWEEP_SEEDS.build(seed_values).sweep_seeds)
    _run(
        SWEEP_TRAINING, training, out, dry_run, lambda base, planner: run_sweep(base, grid, seeds, planner), SweepResult
    )
