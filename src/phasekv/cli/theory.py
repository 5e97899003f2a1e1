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
from phasekv.cli.options import OptionGroup, expand_groups
from phasekv.cli.planned import DRY_RUN, run_planned
from phasekv.files import check_output, write_text_atomic

app = typer.Typer(help="The idealized induction model: optimal and learned compression.", no_args_is_help=True)

N_TOKENS = typer.Option(64, help="vocabulary size N")
N_CHUNKS = typer.Option(8, help="chunks per context L")
CHUNK_SIZE = typer.Option(4, help="positions per chunk S")
N_HEADS = typer.Option(2, help="heads m (< S)")
GAMMA = typer.Option(4.0, help="attention scale")
BETA = typer.Option(4.0, help="unembedding scale")
KAPPA = typer.Option(0.5, help="shared inner product of distinct tokens")
EPS = typer.Option(0.0, help="allowed deviation from exact equiangular geometry")
GEOMETRY = OptionGroup(  # the fields of `InductionConfig` that the commands set
    n_tokens=(int, N_TOKENS),
    n_chunks=(int, N_CHUNKS),
    chunk_size=(int, CHUNK_SIZE),
    n_heads=(int, N_HEADS),
    gamma=(float, GAMMA),
    beta=(float, BETA),
    kappa=(float, KAPPA),
    eps=(float, EPS),
)
SEED = typer.Option(0, help="seed for everything random")


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


THEOREM1 = OptionGroup(  # the fields of `Theorem1Config` beyond the geometry that the command sets
    n_starts=(int, typer.Option(32, help="random starts")),
    n_contexts=(int, typer.Option(4, help="Monte Carlo contexts when eps > 0")),
    steps=(int, typer.Option(2000, help="Adam steps per start")),
    lr=(float, typer.Option(0.1, help="Adam learning rate")),
    seed=(int, SEED),
)


@app.command()
@expand_groups
def theorem1(
    geometry: dict = GEOMETRY, search: dict = THEOREM1, out: Path = _out("theorem1"), dry_run: bool = DRY_RUN
) -> None:
    """Minimise over free query-independent coefficient rules; compare one-hot assignments."""
    _check_out(out)
    from phasekv.theory.theorem1 import Theorem1Config, run_theorem1

    config = Theorem1Config(**geometry, **search)
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


THEOREM2 = OptionGroup(  # the fields of `GateTrainingConfig` beyond the geometry that the command sets
    rho=(float, typer.Option(0.01, help="radius of the initial ball")),
    optimizer=(str, typer.Option("adam", help="adam or sgd")),
    lr=(float, typer.Option(0.01, help="step size")),
    steps=(int, typer.Option(1500, help="training steps")),
    batch_size=(int, typer.Option(256, help="contexts per step")),
    seed=(int, SEED),
)


@app.command()
@expand_groups
def theorem2(
    geometry: dict = GEOMETRY, training: dict = THEOREM2, out: Path = _out("theorem2"), dry_run: bool = DRY_RUN
) -> None:
    """Train log-linear gates from a small ball and report how they concentrate."""
    _check_out(out)
    from phasekv.studies.theory.figure import plot_theorem2
    from phasekv.theory.theorem2 import GateTrainingConfig, train_gates

    config = GateTrainingConfig(**geometry, **training)
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


@app.command()
def sweep(
    n_tokens: str = typer.Option("64", help="comma-separated N values"),
    chunk_size: str = typer.Option("4", help="comma-separated S values"),
    n_heads: str = typer.Option("2,3", help="comma-separated m values"),
    rho: str = typer.Option("0.01", help="comma-separated initial radii"),
    gamma: str = typer.Option("4,8", help="comma-separated attention scales"),
    beta: str = typer.Option("4,8", help="comma-separated unembedding scales"),
    seeds: str = typer.Option("0", help="comma-separated seeds"),
    n_chunks: int = N_CHUNKS,
    kappa: float = KAPPA,
    eps: float = EPS,
    steps: int = typer.Option(600, help="training steps per run"),
    batch_size: int = typer.Option(64, help="contexts per step"),
    lr: float = typer.Option(0.01, help="Adam step size"),
    out: Path = _out("sweep"),
    dry_run: bool = DRY_RUN,
) -> None:
    """Theorem 2 over a grid: fraction concentrating, fraction fully covering, final loss (a quick default grid)."""
    _check_out(out)
    grid = {
        "n_tokens": _ints(n_tokens),
        "chunk_size": _ints(chunk_size),
        "n_heads": _ints(n_heads),
        "rho": _floats(rho),
        "gamma": _floats(gamma),
        "beta": _floats(beta),
    }
    from phasekv.theory.sweep import TABLE_KEYS, run_sweep
    from phasekv.theory.theorem2 import GateTrainingConfig

    base = GateTrainingConfig(n_chunks=n_chunks, kappa=kappa, eps=eps, steps=steps, batch_size=batch_size, lr=lr)
    result = run_planned(lambda planner: run_sweep(base, grid, _ints(seeds), planner), dry_run)
    if result is None:
        return
    _print_rows(result["table"], list(grid) + list(TABLE_KEYS))
    _write(result, out)
