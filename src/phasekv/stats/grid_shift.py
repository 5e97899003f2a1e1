"""The causal test of a phase effect: move the compression grid, keep the prompts.

The same prompts (content and target positions unchanged) are scored with the grid's windows starting at
offset o = 0 .. S-1. A phase effect lives in the grid's coordinate, g = (t - o) mod S, so its profile moves
with the grid: profiles read by grid phase agree across offsets, profiles read by position phase t mod S
rotate. An effect of position alone stays put: profiles by position phase agree, by grid phase they rotate.

Agreement: D_grid and D_position, the spread of the profiles across offsets (root mean square over offsets
and phases of A_o[.] - mean_o A_o[.], points), read by grid phase and by position phase; the smaller one says
which coordinate a pattern lives in.

Statistic: T, the variance over grid phases of the grid-phase profile averaged over the offsets. Over all S
offsets every grid phase meets every position phase once, so an effect of position alone averages out of T
exactly, whatever its size or shape, and so does an offset that raises or lowers every prompt alike; a
pattern that follows the grid survives the averaging whole. Null ("the grid does not matter to any
prompt"): each prompt's outcomes under the offsets are exchangeable, so shuffling them prompt by prompt
leaves T's distribution unchanged; p = (1 + shuffles with T at least the observed one) / (1 + shuffles). The
pattern moves with the grid when p < alpha. (Comparing D_position with D_grid instead would miss a grid
effect beside a larger effect of position phase; relabelling whole runs instead of shuffling prompts would
not do either: relabellings that differ by a constant shift align a grid pattern equally well, so with S = 4
the smallest p would be 1/6.)

Identical prompts (``prompt_ids``: the same tokens, which a deterministic model answers alike at every
offset) are one observation: they are pooled into one weighted cell and share one shuffle. Shuffling the
copies apart would make the null's profiles far smoother than the observed ones, whose copies agree, and
the test would reject a grid that does not matter.

Effect size: that profile, accuracy at each grid phase averaged over the offsets minus its mean over phases
(points), and its amplitude (best minus worst grid phase) with a basic bootstrap interval over units (over
distinct prompts when there is one unit).
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass

import numpy as np

from .phase_test import basic_interval

N_SHUFFLES = 2000
N_BOOTSTRAP = 1000
NUMERICAL_ZERO = 1e-12  # a profile variance below this is rounding error: a flat profile


@dataclass(frozen=True)
class GridShiftTest:
    """``by_grid[o][g]`` / ``by_position[o][r]``: accuracy (percent) with the grid at offset o, by grid phase
    g = (t - o) mod S and by position phase r = t mod S. ``grid_spread_points`` and ``position_spread_points``:
    the root mean square deviation of those profiles from their mean over offsets (points): the smaller one
    says which coordinate the pattern lives in. ``p_value``: the shuffle test of the grid-phase profile.
    ``profile_points``: the grid-phase profile (points, mean over phases 0), ``amplitude_points`` its best
    minus worst phase and ``amplitude_ci`` that amplitude's bootstrap interval (points)."""

    period: int
    offsets: list[int]
    by_grid: list[list[float]]
    by_position: list[list[float]]
    grid_spread_points: float
    position_spread_points: float
    p_value: float
    n_shuffles: int
    moves_with_grid: bool
    profile_points: list[float]
    amplitude_points: float
    amplitude_ci: list[float] | None
    confidence: float
    n_bootstrap: int
    bootstrap: str
    n_prompts: int
    n_distinct_prompts: int
    n_units: int
    method: str = "offsets shuffled per distinct prompt (phasekv.stats.grid_shift)"

    def to_dict(self) -> dict:
        return asdict(self)


def _phase_sums(
    positions: np.ndarray, outcomes: np.ndarray, offsets: np.ndarray, period: int, weights: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Weighted outcome sums and weights by grid phase, each [len(offsets), P], for outcome rows
    [len(offsets), N] aligned with `offsets`, each prompt counted `weights` times."""
    phase = (positions[None, :] - offsets[:, None]) % period  # [O, N]
    sums = np.zeros((len(offsets), period))
    counts = np.zeros((len(offsets), period))
    rows = np.repeat(np.arange(len(offsets)), positions.size)
    np.add.at(sums, (rows, phase.ravel()), (outcomes * weights[None, :]).ravel())
    np.add.at(counts, (rows, phase.ravel()), np.tile(weights, len(offsets)))
    return sums, counts


def _profiles(
    positions: np.ndarray, outcomes: np.ndarray, offsets: np.ndarray, period: int, weights: np.ndarray
) -> np.ndarray:
    """Accuracy by grid phase [len(offsets), P] (0 where no prompt reaches a phase)."""
    sums, counts = _phase_sums(positions, outcomes, offsets, period, weights)
    return sums / np.maximum(counts, 1e-12)


def _spread(profiles: np.ndarray) -> float:
    return float(np.mean((profiles - profiles.mean(axis=0, keepdims=True)) ** 2))


def _pooled(positions, outcomes, units, prompt_ids):
    """Identical prompts of one unit pooled into a cell: (positions [C], mean outcomes [O, C], weights [C],
    unit index [C], distinct-prompt index [C]); raises ValueError when copies of a prompt sit at different
    positions (they are not the same prompt)."""
    pairs = np.stack([units, prompt_ids], axis=1)
    _, first, cell, weights = np.unique(pairs, axis=0, return_index=True, return_inverse=True, return_counts=True)
    cell = cell.ravel()
    _, copy_first, copy_of = np.unique(prompt_ids, return_index=True, return_inverse=True)
    if np.any(positions != positions[copy_first][copy_of.ravel()]):
        raise ValueError("prompts marked identical by prompt_ids sit at different target positions")
    sums = np.zeros((outcomes.shape[0], first.size))
    np.add.at(sums, (slice(None), cell), outcomes)
    _, unit_index = np.unique(units[first], return_inverse=True)
    _, distinct_index = np.unique(prompt_ids[first], return_inverse=True)
    return positions[first], sums / weights, weights.astype(float), unit_index.ravel(), distinct_index.ravel()


def _grid_profile(sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The grid-phase profile [..., P] (proportions, mean over phases 0) from sums and counts [..., O, P]."""
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a phase no prompt reaches stays NaN and is left out
        profile = np.nanmean(sums / counts, axis=-2)  # mean over the offsets
        return profile - np.nanmean(profile, axis=-1, keepdims=True)


def _amplitude(profile: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmax(profile, axis=-1) - np.nanmin(profile, axis=-1)


def grid_shift_test(
    positions,
    outcomes_by_offset,
    offsets,
    period: int,
    alpha: float = 0.05,
    seed: int = 0,
    n_shuffles: int = N_SHUFFLES,
    *,
    units=None,
    prompt_ids=None,
    n_resamples: int = N_BOOTSTRAP,
    confidence: float = 0.95,
):
    """The test for outcomes [len(offsets), N] of the same N prompts (target positions ``positions``) scored with
    the grid at each of ``offsets``. ``units`` (mappings, haystacks: the bootstrap's blocks) default to one per
    prompt; ``prompt_ids`` (equal for identical prompts) to all prompts distinct."""
    positions = np.asarray(positions)
    y = np.asarray(outcomes_by_offset, dtype=float)
    offsets = np.asarray(offsets, dtype=int)
    if y.ndim != 2 or y.shape != (offsets.size, positions.size):
        raise ValueError(
            f"outcomes must be [offsets, prompts] = [{offsets.size}, {positions.size}], got shape {y.shape}"
        )
    if offsets.size < 2 or len(set(offsets.tolist())) != offsets.size:
        raise ValueError(f"the grid-shift test needs at least two distinct offsets, got {offsets.tolist()}")
    if np.any((offsets < 0) | (offsets >= period)):
        raise ValueError(f"offsets must lie in [0, {period}), got {offsets.tolist()}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    units = np.arange(positions.size) if units is None else np.asarray(units)
    prompt_ids = np.arange(positions.size) if prompt_ids is None else np.asarray(prompt_ids)
    for name, values in (("units", units), ("prompt_ids", prompt_ids)):
        if values.shape != positions.shape:
            raise ValueError(f"{name} must have one entry per prompt ({positions.size}), got shape {values.shape}")
    cell_positions, cell_y, weights, unit_index, distinct_index = _pooled(positions, y, units, prompt_ids)
    by_grid = _profiles(cell_positions, cell_y, offsets, period, weights)
    by_position = _profiles(cell_positions, cell_y, np.zeros_like(offsets), period, weights)

    def contrast(outcomes):  # the variance of the profile that `profile_points` reports
        return float(np.nanmean(_grid_profile(*_phase_sums(cell_positions, outcomes, offsets, period, weights)) ** 2))

    observed = contrast(cell_y)
    rng = np.random.default_rng(seed)
    n_distinct = int(distinct_index.max()) + 1
    shuffled = np.empty(n_shuffles)
    for i in range(n_shuffles):
        # one shuffle of the offsets per distinct prompt, shared by its cells
        order = np.argsort(rng.random((offsets.size, n_distinct)), axis=0)[:, distinct_index]
        shuffled[i] = contrast(np.take_along_axis(cell_y, order, axis=0))
    p_value = float((1 + np.sum(shuffled >= observed - NUMERICAL_ZERO)) / (1 + n_shuffles))
    grid_spread, position_spread = np.sqrt(_spread(by_grid)), np.sqrt(_spread(by_position))
    profile, amplitude_ci, blocks = _grid_effect(
        cell_positions, cell_y, weights, unit_index, offsets, period, n_resamples, seed, confidence
    )
    return GridShiftTest(
        period=int(period),
        offsets=[int(o) for o in offsets],
        by_grid=(100 * by_grid).round(3).tolist(),
        by_position=(100 * by_position).round(3).tolist(),
        grid_spread_points=float(100 * grid_spread),
        position_spread_points=float(100 * position_spread),
        p_value=p_value,
        n_shuffles=int(n_shuffles),
        moves_with_grid=bool(p_value < alpha and observed > NUMERICAL_ZERO),
        profile_points=[float(v) for v in 100 * profile],
        amplitude_points=float(100 * _amplitude(profile)),
        amplitude_ci=amplitude_ci,
        confidence=float(confidence),
        n_bootstrap=int(n_resamples),
        bootstrap=blocks,
        n_prompts=int(positions.size),
        n_distinct_prompts=n_distinct,
        n_units=int(unit_index.max()) + 1,
    )


def _grid_effect(positions, outcomes, weights, unit_index, offsets, period, n_resamples, seed, confidence):
    """(the grid-phase profile [P], its amplitude's basic bootstrap interval in points or None, what the
    bootstrap resamples): blocks are units, or the cells themselves when there is one unit."""
    blocks, what = (unit_index, "units") if unit_index.max() >= 1 else (np.arange(positions.size), "distinct prompts")
    n_blocks = int(blocks.max()) + 1
    phase = (positions[None, :] - offsets[:, None]) % period  # [O, C]
    sums = np.zeros((n_blocks, offsets.size, period))
    counts = np.zeros((n_blocks, offsets.size, period))
    rows = np.broadcast_to(np.arange(offsets.size)[:, None], phase.shape)
    cells = np.broadcast_to(blocks[None, :], phase.shape)
    np.add.at(sums, (cells, rows, phase), outcomes * weights[None, :])
    np.add.at(counts, (cells, rows, phase), np.broadcast_to(weights[None, :], phase.shape))
    profile = _grid_profile(sums.sum(axis=0), counts.sum(axis=0))
    if not n_resamples or n_blocks < 2:
        return profile, None, what
    draws = np.random.default_rng(seed).integers(0, n_blocks, size=(n_resamples, n_blocks))
    multiplicity = np.stack([np.bincount(row, minlength=n_blocks) for row in draws]).astype(float)  # [R, B]
    boot = _amplitude(
        _grid_profile(np.einsum("rb,bop->rop", multiplicity, sums), np.einsum("rb,bop->rop", multiplicity, counts))
    )
    interval = basic_interval(float(_amplitude(profile)), boot[np.isfinite(boot)], confidence)
    return profile, [100 * v for v in interval], what
