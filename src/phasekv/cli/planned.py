"""What the long commands (knockout, gates, cycle, theory) share: `--dry-run`, and running with a planner.

The run prints its plan before the long work and an estimate of its time once the first step of every stage
has been timed (`phasekv.planning`). With `--dry-run` it stops there: the plan and the projected time are
printed, nothing else is computed and nothing is written.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

import typer

from phasekv.planning import DryRunDone, Planner

Result = TypeVar("Result")

DRY_RUN = typer.Option(
    False,
    "--dry-run",
    help="print the plan and the time projected from one timed step of each stage (a model is loaded for it); "
    "compute nothing else, write nothing",
)


def run_planned(run: Callable[[Planner], Result], dry_run: bool, quiet: bool = False) -> Result | None:
    """`run(planner)`'s result, or None after a dry run (which prints its plan and projection on stdout)."""
    planner = Planner(dry_run=dry_run, quiet=quiet, file=sys.stdout if dry_run else None)
    try:
        return run(planner)
    except DryRunDone as done:
        typer.echo(done.describe())
        return None
    finally:
        planner.close()
