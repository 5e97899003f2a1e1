"""A sweep of Theorem 2 runs over a grid of parameters and seeds, with a coverage table.

The grid maps :class:`~phasekv.theory.theorem2.GateTrainingConfig` field names (``n_tokens``,
``chunk_size``, ``n_heads``, ``rho``, ``gamma``, ``beta``, ...) to lists of values; every
combination is run once per seed, all other fields taken from a base config.

Result keys: ``base`` (the base config), ``grid``, ``seeds``, ``runs`` (one dict per run: the grid
values, ``seed`` and the run's ``final`` summary without trajectory) and ``table`` (one row per
grid point, keys :data:`TABLE_KEYS` after the grid fields).
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import asdict, replace

from phasekv.planning import Planner, WorkPlan, as_planner
from phasekv.theory.theorem2 import GateTrainingConfig, train_gates, training_stages

TABLE_KEYS = (
    "n_runs",
    "frac_concentrated",  # every head's four effective numbers <= the threshold
    "frac_full_coverage",  # concentrating heads cover all S - 1 non-final positions
    "mean_collisions",
    "final_loss_mean",
    "final_loss_std",
    "accuracy_mean",
    "min_position_accuracy_mean",  # accuracy at the worst query position, averaged over seeds
)


def summarise(runs: list[dict]) -> dict:
    """One table row (:data:`TABLE_KEYS`) from the ``final`` dicts of runs at one grid point."""
    losses = [run["loss"] for run in runs]
    return {
        "n_runs": len(runs),
        "frac_concentrated": sum(run["all_concentrated"] for run in runs) / len(runs),
        "frac_full_coverage": sum(run["full_coverage"] for run in runs) / len(runs),
        "mean_collisions": statistics.fmean(run["collisions"] for run in runs),
        "final_loss_mean": statistics.fmean(losses),
        "final_loss_std": statistics.pstdev(losses),
        "accuracy_mean": statistics.fmean(run["accuracy"] for run in runs),
        "min_position_accuracy_mean": statistics.fmean(min(run["accuracy_by_position"]) for run in runs),
    }


def sweep_configs(base: GateTrainingConfig, grid: dict[str, list], seeds: list[int]) -> list[GateTrainingConfig]:
    """The config of every run, in the order the sweep trains them."""
    names = list(grid)
    return [
        replace(base, **dict(zip(names, values, strict=True)), seed=seed)
        for values in itertools.product(*(grid[name] for name in names))
        for seed in seeds
    ]


def sweep_plan(base: GateTrainingConfig, grid: dict[str, list], seeds: list[int]) -> WorkPlan:
    configs = sweep_configs(base, grid, seeds)
    counts = {"grid points": math.prod(map(len, grid.values())), "seeds": len(seeds), "runs": len(configs)}
    return WorkPlan("Theorem 2 sweep over " + ", ".join(grid), training_stages(configs), counts)


def run_sweep(
    base: GateTrainingConfig, grid: dict[str, list], seeds: list[int], progress: bool | Planner = True
) -> dict:
    """Train every grid point for every seed; see the module docstring for the result's keys."""
    names = list(grid)
    points = list(itertools.product(*(grid[name] for name in names)))
    planner = as_planner(progress)
    planner.start(sweep_plan(base, grid, seeds))
    runs, table = [], []
    for values in points:
        settings = dict(zip(names, values, strict=True))
        finals = []
        for seed in seeds:
            final = train_gates(replace(base, **settings, seed=seed), planner)["final"]
            runs.append({**settings, "seed": seed, "final": final})
            finals.append(final)
        table.append({**settings, **summarise(finals)})
    planner.close()
    return {"base": asdict(base), "grid": grid, "seeds": seeds, "runs": runs, "table": table}
