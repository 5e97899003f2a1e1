"""The causal test of a phase effect: move the compression grid, keep the prompts.

The same prompts (content and target positions unchanged) are scored with the grid's windows starting at
offset o = 0 .. S-1. A phase effect lives in the grid's coordinate, g = (t - o) mod S, so its profile moves
with the grid: profiles read by grid phase agree across offsets, profiles read by position phase t mod S
rotate. An effect of position alone stays put: profiles by position phase agree, by grid phase they rotate.

Statistic: T = D_position - D_grid, where D is the spread of the profiles across offsets, mean over offsets
and phases of (A_o[.] - mean_o A_o[.])^2, read by position phase and by grid phase (points^2). A pattern that
follows the grid makes D_grid small and D_position large; one that follows position the reverse. Null ("the
grid does not matter to any prompt"): each prompt's outcomes under the S offsets are exchangeable, so shuffling
them prompt by prompt leaves T's distribution unchanged; p = (1 + shuffles with T at least the observed one) /
(1 + shuffles). A dependence on the grid that is not phase-aligned does not raise T.
(Relabelling whole runs would not do: relabellings that differ by a constant shift align a grid pattern
equally well, so with S = 4 the smallest p would be 1/6.)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

N_SHUFFLES = 2000


@dataclass(frozen=True)
class GridShiftTest:
    """``by_grid[o][g]`` / ``by_position[o][r]``: accuracy (percent) with the grid at offset o, by grid phase
    g = (t - o) mod S and by position phase r = t mod S. ``grid_spread_points`` and ``position_spread_points``:
    the root mean square deviation of those profiles from their mean over offsets (points): the smaller one
    says which coordinate the pattern lives in. ``p_value``: the shuffle test of the grid alignment."""

    period: int
    offsets: list[int]
    by_grid: list[list[float]]
    by_position: list[list[float]]
    grid_spread_points: float
    position_spread_points: float
    p_value: float
    n_shuffles: int
    moves_with_grid: bool
    method: str = "offsets shuffled prompt by prompt (phasekv.stats.grid_shift)"

    def to_dict(self) -> dict:
        return asdict(self)


def _profiles(positions: np.ndarray, outcomes: np.ndarray, offsets: np.ndarray, period: int) -> np.ndarray:
    """Accuracy by grid phase [len(offsets), P] for outcome rows [len(offsets), N] aligned with `offsets`."""
    phase = (positions[None, :] - offsets[:, None]) % period  # [O, N]
    sums = np.zeros((len(offsets), period))
    counts = np.zeros((len(offsets), period))
    rows = np.repeat(np.arange(len(offsets)), positions.size)
    np.add.at(sums, (rows, phase.ravel()), outcomes.ravel())
    np.add.at(counts, (rows, phase.ravel()), 1.0)
    return sums / np.maximum(counts, 1.0)


def _spread(profiles: np.ndarray) -> float:
    return float(np.mean((profiles - profiles.mean(axis=0, keepdims=True)) ** 2))


def grid_shift_test(
    positions,
    outcomes_by_offset,
    offsets,
    period: int,
    alpha: float = 0.05,
    seed: int = 0,
    n_shuffles: int = N_SHUFFLES,
):
    """The test for outcomes [len(offsets), N] of the same N prompts (target positions ``positions``) scored with
    the grid at each of ``offsets``."""
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
    by_grid = _profiles(positions, y, offsets, period)
    by_position = _profiles(positions, y, np.zeros_like(offsets), period)
    zero = np.zeros_like(offsets)

    def contrast(outcomes):
        return _spread(_profiles(positions, outcomes, zero, period)) - _spread(
            _profiles(positions, outcomes, offsets, period)
        )

    observed = contrast(y)
    rng = np.random.default_rng(seed)
    shuffled = np.empty(n_shuffles)
    for i in range(n_shuffles):
        order = np.argsort(rng.random(y.shape), axis=0)  # an independent shuffle of each prompt's offsets
        shuffled[i] = contrast(np.take_along_axis(y, order, axis=0))
    p_value = float((1 + np.sum(shuffled >= observed - 1e-12)) / (1 + n_shuffles))
    grid_spread, position_spread = np.sqrt(_spread(by_grid)), np.sqrt(_spread(by_position))
    return GridShiftTest(
        period=int(period),
        offsets=[int(o) for o in offsets],
        by_grid=(100 * by_grid).round(3).tolist(),
        by_position=(100 * by_position).round(3).tolist(),
        grid_spread_points=float(100 * grid_spread),
        position_spread_points=float(100 * position_spread),
        p_value=p_value,
        n_shuffles=int(n_shuffles),
        moves_with_grid=bool(p_value < alpha and grid_spread < position_spread),
    )
