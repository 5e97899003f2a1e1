"""``phasekv theory``: check the idealized theory numerically (Theorems 1 and 2, and a sweep).

Every command takes ``--seed`` and ``--out results.json``; the JSON (written atomically) records
every parameter. ``theorem2 --out`` also writes the concentration trajectories as a PNG beside it.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import typer

from phasekv.cli.errors import one_line_errors
from phasekv.cli.options import OptionGroup, expand_groups
from phasekv.files import check_output

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
OUT = typer.Option(None, help="write the result JSON here")


def write_json_atomic(result: dict, path: Path) -> None:
    """Write ``result`` as JSON to ``path`` via a temporary file in the same folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as handle:
        json.dump(result, handle, indent=1)
    os.replace(handle.name, path)


def _check_out(out: Path | None) -> None:
    """A bad --out fails before the computation (one line, exit code 2)."""
    if out is not None:
        with one_line_errors("theory"):
            check_output(out)


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


@app.command()
@expand_groups
def theorem1(
    geometry: dict = GEOMETRY,
    n_starts: int = typer.Option(32, help="random starts"),
    n_contexts: int = typer.Option(4, help="Monte Carlo contexts when eps > 0"),
    steps: int = typer.Option(2000, help="Adam steps per start"),
    lr: float = typer.Option(0.1, help="Adam learning rate"),
    seed: int = SEED,
    out: Path | None = OUT,
) -> None:
    """Minimise over free query-independent coefficient rules; compare one-hot assignments."""
    _check_out(out)
    from phasekv.theory.theorem1 import Theorem1Config, run_theorem1

    config = Theorem1Config(
        **geometry,
        n_starts=n_starts,
        n_contexts=n_contexts,
        steps=steps,
        lr=lr,
        seed=seed,
    )
    result = run_theorem1(config)
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
    if out:
        write_json_atomic(result, out)


@app.command()
@expand_groups
def theorem2(
    geometry: dict = GEOMETRY,
    rho: float = typer.Option(0.01, help="radius of the initial ball"),
    optimizer: str = typer.Option("adam", help="adam or sgd"),
    lr: float = typer.Option(0.01, help="step size"),
    steps: int = typer.Option(1500, help="training steps"),
    batch_size: int = typer.Option(256, help="contexts per step"),
    seed: int = SEED,
    out: Path | None = OUT,
) -> None:
    """Train log-linear gates from a small ball and report how they concentrate."""
    _check_out(out)
    from phasekv.studies.theory.figure import plot_theorem2
    from phasekv.theory.theorem2 import GateTrainingConfig, train_gates

    config = GateTrainingConfig(
        **geometry,
        rho=rho,
        optimizer=optimizer,
        lr=lr,
        steps=steps,
        batch_size=batch_size,
        seed=seed,
    )
    result = train_gates(config, progress=True)
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
    if out:
        write_json_atomic(result, out)
        plot_theorem2(result, out.with_suffix(".png"))


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
    out: Path | None = OUT,
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
    result = run_sweep(base, grid, _ints(seeds))
    _print_rows(result["table"], list(grid) + list(TABLE_KEYS))
    if out:
        write_json_atomic(result, out)
