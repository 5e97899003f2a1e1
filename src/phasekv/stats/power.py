"""What a design could have seen: the minimum detectable effect of the phase verdict, simulated on the
design itself.

The smallest drop at one phase (accuracy points, at one phase of P, the others unchanged) that the verdict
calls "phase-sensitive" in at least ``power`` of simulated runs, on the run's own cells: its units, target
positions and distinct prompts (identical prompts share one outcome, so repeating them adds nothing), its
phase-free accuracies (unit effects and the smooth part of the run, or an assumed accuracy before a run),
the phase of the drop drawn anew in every simulated run. "Calls" means the whole rule: the test rejects
*and* the amplitude's lower bound clears the minimum effect, so the MDE is never below that minimum.
"""

from __future__ import annotations

import numpy as np

from .phase_test import PhaseDesign, amplitude, basic_interval

POWER = 0.8
N_SIMULATIONS = 200
N_RESAMPLES = 200
GRID_POINTS = (2, 3, 5, 7, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100)


def detection_rate(
    design: PhaseDesign,
    base: np.ndarray,
    drop_points: float,
    alpha: float,
    min_effect: float,
    n_simulations: int = N_SIMULATIONS,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
) -> float:
    """Share of simulated runs the verdict calls phase-sensitive when one phase (drawn per run) loses
    ``drop_points`` from the cells' accuracies ``base`` [C]."""
    rng = np.random.default_rng(seed)
    phases = rng.integers(0, design.period, n_simulations)
    at_phase = (design.cell_position % design.period)[None, :] == phases[:, None]
    probability = np.clip(base[None, :] - drop_points / 100 * at_phase, 0.0, 1.0)
    sums = rng.binomial(design.cell_count.astype(int)[None, :], probability).astype(float)
    result = design.evaluate(sums)
    found = np.zeros(n_simulations, dtype=bool)
    rejected = np.flatnonzero(result["p_value"] < alpha)
    if rejected.size:
        observed = amplitude(result["profile"][rejected], result["mean"][rejected])
        draws, _ = design.bootstrap(sums[rejected], n_resamples, seed)
        lower = np.array([basic_interval(o, d, 0.95)[0] for o, d in zip(observed, draws, strict=True)])
        found[rejected] = 100 * lower >= min_effect
    return float(found.mean())


def minimum_detectable_effect(
    design: PhaseDesign,
    base: np.ndarray,
    alpha: float,
    min_effect: float,
    power: float = POWER,
    n_simulations: int = N_SIMULATIONS,
    seed: int = 0,
    basis: str = "the run's unit effects and smooth part",
) -> dict:
    """The smallest drop on ``GRID_POINTS`` (then refined between grid points) found with ``power``; the
    record says what was simulated. ``points`` is None when even a drop to 0% is not found often enough."""
    rates: dict[float, float] = {}

    def rate(points: float) -> float:
        if points not in rates:
            rates[points] = detection_rate(design, base, points, alpha, min_effect, n_simulations, seed=seed)
        return rates[points]

    found = next((p for p in GRID_POINTS if rate(p) >= power), None)
    if found is not None:
        low = max([p for p in GRID_POINTS if p < found], default=0)
        for _ in range(3):  # bisect between the last grid point missed and the first found
            middle = round((low + found) / 2, 1)
            if middle in (low, found):
                break
            if rate(middle) >= power:
                found = middle
            else:
                low = middle
    return {
        "points": found,
        "power": power,
        "alpha": alpha,
        "min_effect_points": min_effect,
        "simulations": n_simulations,
        "distinct_prompts": int(design.n_distinct),
        "cells": int(design.cell_count.size),
        "base": basis,
        "mean_base_accuracy": float(np.average(base, weights=design.cell_count)),
        "detection_rates": {f"{k:g}": v for k, v in sorted(rates.items())},
        "seed": seed,
        "what": "drop at one phase (drawn per simulated run) that the verdict calls phase-sensitive",
    }
