"""What a design could have seen: the minimum detectable effect of the phase verdict, simulated on the
design itself.

The smallest drop at one phase (accuracy points, at one phase of P, the others unchanged) that the verdict
calls "phase-sensitive" in at least ``power`` of simulated runs, on the run's own cells: its units, target
positions and distinct prompts (identical prompts share one outcome, so repeating them adds nothing), its
phase-free accuracies (unit effects and the smooth part of the run, or an assumed accuracy before a run),
the phase of the drop drawn anew in every simulated run. "Calls" means the whole rule: the test rejects
*and* the amplitude's lower bound clears the minimum effect, so the MDE is never below that minimum, *and*,
with a chance level, the simulated run's mean accuracy has an interval above it (a run at chance is not judged,
so a drop that takes a model to chance is not one the design can see).

Where the grid was moved and the verdict rests on the grid-shift test, its MDE is the grid-shift test's own
(`grid_shift_mde`): a drop at one *grid* phase, simulated on the run's own outcomes at every offset with the
offsets shuffled per distinct prompt (the test's null), so its units, positions, identical prompts and the
way its prompts' outcomes agree across offsets are the run's.
"""

from __future__ import annotations

import numpy as np

from .grid_shift import NUMERICAL_ZERO, GridShiftDesign
from .phase_test import PhaseDesign, amplitude

POWER = 0.8
N_SIMULATIONS = 200
N_RESAMPLES = 200
GRID_SHIFT_SHUFFLES = 200  # per simulated run: the smallest p, 1/201, is well below any usual alpha
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
    chance: float | None = None,
) -> float:
    """Share of simulated runs the verdict calls phase-sensitive when one phase (drawn per run) loses
    ``drop_points`` from the cells' accuracies ``base`` [C]; with ``chance``, only runs whose mean accuracy's
    interval (the verdict's: percentile, over the same resamples) lies above it are judged at all."""
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
        lower, _ = design.amplitude_bounds({key: value[rejected] for key, value in _batched(result)}, 0.95)
        lower = np.minimum(lower, observed)  # as the verdict reads it (`PhaseDesign.test`)
        judged = True
        if chance is not None:
            judged = np.quantile(design.bootstrap_means(sums[rejected], n_resamples, seed), 0.025, axis=1) > chance
        found[rejected] = (100 * lower >= min_effect) & judged
    return float(found.mean())


def _batched(result: dict):
    """The per-run entries of `PhaseDesign.evaluate`'s dict (the units' covariance may be None)."""
    return ((key, value) for key, value in result.items() if value is not None)


def _smallest_detected(rate, power: float) -> tuple[float | None, dict[float, float]]:
    """The smallest drop on ``GRID_POINTS`` (then bisected between grid points) whose detection rate
    ``rate(points)`` reaches ``power``, None when even a drop to 0% does not; and every rate computed."""
    rates: dict[float, float] = {}

    def rate_at(points: float) -> float:
        if points not in rates:
            rates[points] = rate(points)
        return rates[points]

    found = next((p for p in GRID_POINTS if rate_at(p) >= power), None)
    if found is not None:
        low = max([p for p in GRID_POINTS if p < found], default=0)
        for _ in range(3):  # bisect between the last grid point missed and the first found
            middle = round((low + found) / 2, 1)
            if middle in (low, found):
                break
            if rate_at(middle) >= power:
                found = middle
            else:
                low = middle
    return found, rates


def required_rate(power: float, n_simulations: int) -> float:
    """The simulated detection rate a drop must reach to count as found with ``power``: ``power`` plus one Monte
    Carlo standard error. The search keeps the smallest drop whose noisy rate crosses its bar, so a bar at
    ``power`` itself would pick drops whose true rate is below it as often as not."""
    return power + float(np.sqrt(power * (1 - power) / n_simulations))


def _searched(rate, power: float, alpha: float, min_effect: float, n_simulations: int, seed: int, **described) -> dict:
    """The MDE record: the smallest drop whose ``rate`` reaches `required_rate` (`_smallest_detected`), the rule
    and the simulation it was found with, what was simulated (``described``) and every rate computed."""
    bar = required_rate(power, n_simulations)
    found, rates = _smallest_detected(rate, bar)
    return {
        "points": found,
        "power": power,
        "required_rate": bar,
        "alpha": alpha,
        "min_effect_points": min_effect,
        "simulations": n_simulations,
        "seed": seed,
        **described,
        "detection_rates": {f"{k:g}": v for k, v in sorted(rates.items())},
    }


def minimum_detectable_effect(
    design: PhaseDesign,
    base: np.ndarray,
    alpha: float,
    min_effect: float,
    power: float = POWER,
    n_simulations: int = N_SIMULATIONS,
    seed: int = 0,
    basis: str = "the run's unit levels and a smooth curve of position shared by the units",
    chance: float | None = None,
) -> dict:
    """The smallest drop on ``GRID_POINTS`` (then refined between grid points) found with ``power``; the
    record says what was simulated. ``points`` is None when even a drop to 0% is not found often enough.
    ``chance``: the verdict's chance level (None: no chance rule)."""
    return _searched(
        lambda points: detection_rate(design, base, points, alpha, min_effect, n_simulations, seed=seed, chance=chance),
        power,
        alpha,
        min_effect,
        n_simulations,
        seed,
        chance=chance,
        distinct_prompts=int(design.n_distinct),
        cells=int(design.cell_count.size),
        base=basis,
        mean_base_accuracy=float(np.average(base, weights=design.cell_count)),
        what="drop at one phase (drawn per simulated run) that the verdict calls phase-sensitive",
    )


def grid_shift_detection_rate(
    design: GridShiftDesign,
    cell_outcomes: np.ndarray,
    drop_points: float,
    alpha: float,
    min_effect: float,
    n_simulations: int = N_SIMULATIONS,
    n_shuffles: int = GRID_SHIFT_SHUFFLES,
    n_resamples: int = N_RESAMPLES,
    seed: int = 0,
    power: float | None = None,
    chance: float | None = None,
) -> float:
    """Share of simulated grid-shift runs that the verdict calls phase-sensitive (the pattern moves with the grid,
    repeats along the grid coordinate, and the grid-phase amplitude's lower bound clears ``min_effect``) when one
    grid phase (drawn per run) loses ``drop_points``. Each run starts from the run's own cell outcomes [O, C]
    with the offsets shuffled per distinct prompt (a draw from the null: every prompt keeps its outcomes, the grid
    matters to none), then
    every outcome at the weak grid phase is lost with the probability that takes ``drop_points`` off that
    phase's accuracy. With ``chance``, a run is judged only when its mean accuracy's interval lies above it, as
    the verdict's chance rule asks. With ``power``, the runs stop once the rate's side of ``power`` is decided
    (the share is then over the runs made)."""
    rng = np.random.default_rng(seed)
    weights = np.broadcast_to(design.weights, design.phase.shape)
    periodicity = design.periodicity_design()
    found, needed = 0, (power or 0) * n_simulations
    for simulation in range(n_simulations):
        if power is not None and (found >= needed or found + n_simulations - simulation < needed):
            return found / simulation  # decided: the remaining runs cannot move the rate across `power`
        null = design.shuffled(cell_outcomes, 1, rng)[0]
        at_weak = design.phase == rng.integers(design.period)  # [O, C]
        accuracy = float(np.average(null[at_weak], weights=weights[at_weak]))
        lost = min(1.0, drop_points / 100 / accuracy) if accuracy > 0 else 0.0
        simulated = np.where(at_weak & (rng.random(at_weak.shape) < lost), 0.0, null)
        observed, p_value = design.p_value(simulated, n_shuffles, rng, stop_at=alpha)
        periodic = not periodicity.testable or design.periodicity(simulated, periodicity) < alpha
        if p_value < alpha and observed > NUMERICAL_ZERO and periodic:
            _, interval, _ = design.amplitude_interval(simulated, 0.95)
            judged = chance is None or design.mean_interval(simulated, n_resamples, seed + simulation, 0.95)[0] > chance
            found += interval is not None and interval[0] >= min_effect and judged
    return found / n_simulations


def grid_shift_mde(
    design: GridShiftDesign,
    cell_outcomes: np.ndarray,
    alpha: float,
    min_effect: float,
    power: float = POWER,
    n_simulations: int = N_SIMULATIONS,
    seed: int = 0,
    chance: float | None = None,
) -> dict:
    """The grid-shift test's minimum detectable effect: the smallest drop at one grid phase found with
    ``power`` on the run's own prompts and offsets (`grid_shift_detection_rate`); the record has the keys of
    `minimum_detectable_effect`'s."""
    return _searched(
        lambda points: grid_shift_detection_rate(
            design,
            cell_outcomes,
            points,
            alpha,
            min_effect,
            n_simulations,
            seed=seed,
            power=required_rate(power, n_simulations),
            chance=chance,
        ),
        power,
        alpha,
        min_effect,
        n_simulations,
        seed,
        shuffles=GRID_SHIFT_SHUFFLES,
        chance=chance,
        distinct_prompts=int(design.n_distinct),
        cells=int(design.weights.size),
        base="the run's own outcomes, offsets shuffled per distinct prompt",
        mean_base_accuracy=float(np.average(cell_outcomes.mean(axis=0), weights=design.weights)),
        detection_rates_over="the simulated runs needed to decide each rate's side of the power",
        what="drop at one grid phase (drawn per simulated run) that the grid-shift verdict calls phase-sensitive",
    )
