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

Periodic or not: a pattern can follow the grid without repeating with it (a cliff at one grid coordinate
t - o, a partial first window): it moves with the grid, and its grid-phase profile is not flat, yet it is no weak
phase. So the outcomes are also read along the grid coordinate u = t - o itself, every prompt at every offset one
observation (identical prompts once), and the phase test (`phase_test`: the phase frequencies k/P against their
neighbours, after each unit's smooth curve) asks whether the grid pattern repeats every P tokens of u. Over all
offsets every prompt meets every grid phase, so an effect of position phase t mod P averages out of u too.

Effect size: that profile, accuracy at each grid phase averaged over the offsets minus its mean over phases
(points), and its amplitude (best minus worst grid phase) with an interval simultaneous over the pairs of grid
phases (`amplitude`), on the larger of the variances over distinct prompts and over units.
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass

import numpy as np

from .amplitude import ordered_pairs, simultaneous_amplitude_bounds
from .phase_test import PhaseDesign

N_SHUFFLES = 2000
N_BOOTSTRAP = 1000
NUMERICAL_ZERO = 1e-12  # a profile variance below this is rounding error: a flat profile
SHUFFLE_BATCH = 100  # shuffles drawn at once (memory: SHUFFLE_BATCH x offsets x cells floats)


@dataclass(frozen=True)
class GridShiftTest:
    """``by_grid[o][g]`` / ``by_position[o][r]``: accuracy (percent) with the grid at offset o, by grid phase
    g = (t - o) mod S and by position phase r = t mod S. ``grid_spread_points`` and ``position_spread_points``:
    the root mean square deviation of those profiles from their mean over offsets (points): the smaller one
    says which coordinate the pattern lives in. ``p_value``: the shuffle test of the grid-phase profile.
    ``profile_points``: the grid-phase profile (points, mean over phases 0), ``amplitude_points`` its best
    minus worst phase and ``amplitude_ci`` that amplitude's interval (points); ``mde`` the test's
    minimum detectable single-phase drop, when computed (`power.grid_shift_mde`). ``periodic_p_value``: the phase
    test along the grid coordinate t - o (does the grid pattern repeat every ``period`` tokens?), ``periodic``
    whether it rejects at alpha (None where the grid coordinates span too few periods to tell)."""

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
    mde: dict | None = None
    periodic_p_value: float | None = None
    periodic: bool | None = None
    method: str = "offsets shuffled per distinct prompt (phasekv.stats.grid_shift)"

    def to_dict(self) -> dict:
        return asdict(self)


class GridShiftDesign:
    """The cells of a grid-shift run, built once and tested many times: identical prompts of one unit pooled
    into a weighted cell (``positions``, ``weights`` [C]), each cell's unit (the bootstrap's block) and distinct
    prompt (what one shuffle moves), and the linear map from cell outcomes [O, C] to the grid-phase profile
    averaged over the offsets. Raises ValueError for inconsistent input."""

    def __init__(self, positions, offsets, period: int, units=None, prompt_ids=None):
        positions = np.asarray(positions)
        offsets = np.asarray(offsets, dtype=int)
        if offsets.size < 2 or len(set(offsets.tolist())) != offsets.size:
            raise ValueError(f"the grid-shift test needs at least two distinct offsets, got {offsets.tolist()}")
        if np.any((offsets < 0) | (offsets >= period)):
            raise ValueError(f"offsets must lie in [0, {period}), got {offsets.tolist()}")
        units = np.arange(positions.size) if units is None else np.asarray(units)
        prompt_ids = np.arange(positions.size) if prompt_ids is None else np.asarray(prompt_ids)
        for name, values in (("units", units), ("prompt_ids", prompt_ids)):
            if values.shape != positions.shape:
                raise ValueError(f"{name} must have one entry per prompt ({positions.size}), got shape {values.shape}")
        _, copy_first, copy_of = np.unique(prompt_ids, return_index=True, return_inverse=True)
        if np.any(positions != positions[copy_first][copy_of.ravel()]):
            raise ValueError("prompts marked identical by prompt_ids sit at different target positions")
        # numbered by first appearance, so that any labelling of the same identities is the same design
        prompt_ids = np.argsort(np.argsort(copy_first))[copy_of.ravel()]
        pairs = np.stack([units, prompt_ids], axis=1)
        _, first, cell, counts = np.unique(pairs, axis=0, return_index=True, return_inverse=True, return_counts=True)
        self.period, self.offsets, self.n_prompts = int(period), offsets, int(positions.size)
        self.cell_of_prompt = cell.ravel()
        self.positions, self.weights = positions[first], counts.astype(float)
        self.unit_index = np.unique(units[first], return_inverse=True)[1].ravel()
        self.distinct_index = np.unique(prompt_ids[first], return_inverse=True)[1].ravel()
        self.n_distinct, self.n_units = int(self.distinct_index.max()) + 1, int(self.unit_index.max()) + 1
        self.phase = (self.positions[None, :] - offsets[:, None]) % period  # [O, C] grid phase of every cell
        counts = _phase_totals(self.phase, np.ones(self.phase.shape), self.weights, period)[1]  # [O, P]
        # profile[g] = mean over the offsets that reach g of (weighted sum / weight) at (o, g): linear in outcomes
        reached = counts > 0  # [O, P]
        self.reached_phases = reached.any(axis=0)
        per_offset = np.where(reached, 1 / np.maximum(counts, 1e-12), 0.0) / np.maximum(reached.sum(axis=0), 1)
        one_hot = self.phase[:, :, None] == np.arange(period)  # [O, C, P]
        self._profile_map = one_hot * (self.weights[None, :, None] * per_offset[:, None, :])  # [O, C, P]

    def periodicity_design(self) -> PhaseDesign:
        """The phase test's design along the grid coordinate u = t - o: every (cell, offset) one observation of
        its unit at position u, so that a batch of cell outcomes [O, C] flattened is its outcome vector."""
        n_offsets, n_cells = self.phase.shape
        units = np.tile(self.unit_index, n_offsets)
        coordinates = (self.positions[None, :] - self.offsets[:, None]).ravel()
        return PhaseDesign(units, coordinates - coordinates.min(), self.period, np.arange(n_offsets * n_cells))

    def periodicity(self, cell_outcomes: np.ndarray, design: PhaseDesign | None = None) -> np.ndarray:
        """The phase test's p-value along the grid coordinate for cell outcomes [..., O, C] (1 where the grid
        coordinates span too few periods: `PhaseDesign.testable`)."""
        design = design or self.periodicity_design()
        flat = np.reshape(cell_outcomes, (-1, design.n_prompts))
        return design.evaluate(design.cell_sums(flat))["p_value"].reshape(np.shape(cell_outcomes)[:-2])

    def pool(self, outcomes) -> np.ndarray:
        """Outcomes [O, N] by prompt -> mean outcome of each cell [O, C]."""
        sums = np.zeros((outcomes.shape[0], self.weights.size))
        np.add.at(sums, (slice(None), self.cell_of_prompt), outcomes)
        return sums / self.weights

    def profile(self, cell_outcomes: np.ndarray) -> np.ndarray:
        """The grid-phase profile [..., P] (proportions, mean over the reached phases 0, NaN at a phase no prompt
        reaches) of cell outcomes [..., O, C]."""
        profile = np.einsum("...oc,ocp->...p", cell_outcomes, self._profile_map)
        profile = np.where(self.reached_phases, profile, np.nan)
        return profile - np.nanmean(profile, axis=-1, keepdims=True)

    def statistic(self, cell_outcomes: np.ndarray) -> np.ndarray:
        """T [...]: the variance over grid phases of the profile (see the module docstring)."""
        return np.nanmean(self.profile(cell_outcomes) ** 2, axis=-1)

    def shuffled(self, cell_outcomes: np.ndarray, n: int, rng: np.random.Generator, cells=None) -> np.ndarray:
        """``n`` copies [n, O, C'] of cell outcomes [O, C] (of ``cells`` only, when given) with the offsets
        shuffled per distinct prompt (one shuffle shared by its cells): draws from the null that the grid
        matters to no prompt."""
        cells = np.arange(self.weights.size) if cells is None else cells
        distinct = np.unique(self.distinct_index[cells], return_inverse=True)[1].ravel()
        keys = rng.random((n, self.offsets.size, int(distinct.max(initial=-1)) + 1))[:, :, distinct]
        order = np.argsort(keys, axis=1)
        return np.take_along_axis(np.broadcast_to(cell_outcomes[:, cells], order.shape), order, axis=1)

    def p_value(
        self, cell_outcomes: np.ndarray, n_shuffles: int, rng: np.random.Generator, stop_at: float | None = None
    ) -> tuple[float, float]:
        """(observed T, shuffle p-value) of cell outcomes [O, C]. A cell with one outcome at every offset is the
        same under every shuffle, so only the others are shuffled; their share of the profile is added to the
        fixed share of the rest. With ``stop_at``, shuffling stops once the p-value is sure to reach it (the
        p-value returned is then a lower bound that already does)."""
        observed = float(self.statistic(cell_outcomes))
        varying = np.flatnonzero(np.ptp(cell_outcomes, axis=0) > 0)
        if varying.size == 0:
            return observed, 1.0
        fixed = np.einsum(
            "oc,ocp->p", np.delete(cell_outcomes, varying, axis=1), np.delete(self._profile_map, varying, axis=1)
        )
        varying_map = self._profile_map[:, varying].reshape(-1, self.period)  # [O * C', P]
        exceed = 0
        for start in range(0, n_shuffles, SHUFFLE_BATCH):
            batch = self.shuffled(cell_outcomes, min(SHUFFLE_BATCH, n_shuffles - start), rng, varying)
            profile = np.where(self.reached_phases, fixed + batch.reshape(batch.shape[0], -1) @ varying_map, np.nan)
            profile -= np.nanmean(profile, axis=-1, keepdims=True)
            exceed += int(np.sum(np.nanmean(profile**2, axis=-1) >= observed - NUMERICAL_ZERO))
            if stop_at is not None and (1 + exceed) / (1 + n_shuffles) >= stop_at:
                break
        return observed, (1 + exceed) / (1 + n_shuffles)

    def mean_interval(self, cell_outcomes: np.ndarray, n_resamples: int, seed: int, confidence: float) -> list:
        """The percentile bootstrap interval (over the blocks of `amplitude_interval`) of the mean accuracy at
        the first offset, the grid the model has, over distinct prompts (identical ones count once, as in the
        position design): what the verdict's chance rule reads, for a run of cell outcomes [O, C]."""
        blocks = self.unit_index if self.n_units > 1 else np.arange(self.weights.size)
        n_blocks = int(blocks.max()) + 1
        sums = np.bincount(blocks, cell_outcomes[0], minlength=n_blocks)
        counts = np.bincount(blocks, minlength=n_blocks).astype(float)
        draws = np.random.default_rng(seed).integers(0, n_blocks, size=(n_resamples, n_blocks))
        means = sums[draws].sum(axis=1) / counts[draws].sum(axis=1)
        tail = (1 - confidence) / 2
        return [float(v) for v in np.quantile(means, [tail, 1 - tail])]

    def amplitude_interval(self, cell_outcomes: np.ndarray, confidence: float):
        """(the profile [P], its amplitude's interval in points, what the variance is taken over) of cell outcomes
        [O, C]: simultaneous over the pairs of grid phases (`amplitude.simultaneous_amplitude_bounds`), each
        difference with the larger of its variance over distinct prompts and, with several units, over units (on
        n_units - 1 degrees of freedom): the prompts' outcomes across offsets, or a unit's prompts, may agree."""
        profile = self.profile(cell_outcomes)
        # each cell's share of the (uncentred) profile, less what its phase's mean predicts: linear in the outcomes
        sums, counts = _phase_totals(self.phase, cell_outcomes, self.weights, self.period)
        expected = np.take_along_axis(sums / np.maximum(counts, 1e-12), self.phase, axis=1)  # [O, C]
        influence = np.einsum("oc,ocp->cp", cell_outcomes - expected, self._profile_map)  # [C, P]
        a, b = ordered_pairs(self.period)
        clusterings = [(self.distinct_index, np.inf)]
        if self.n_units >= 2:
            clusterings.append((self.unit_index, float(self.n_units - 1)))
        variances = []
        for blocks, df in clusterings:
            n_blocks = int(blocks.max()) + 1
            if n_blocks < 2:
                continue
            scores = np.zeros((n_blocks, self.period))
            np.add.at(scores, blocks, influence)
            pairs = scores[:, a] - scores[:, b]  # [blocks, pairs]
            variances.append(((pairs**2).sum(axis=0) * n_blocks / (n_blocks - 1), df))
        what = "distinct prompts and units" if len(variances) == 2 else "distinct prompts"
        if not variances:
            return profile, None, what
        low, high = simultaneous_amplitude_bounds(profile[None], [(v[None], df) for v, df in variances], confidence)
        return profile, [100 * float(low[0]), 100 * float(high[0])], what


def _phase_totals(phase: np.ndarray, cell_outcomes: np.ndarray, weights: np.ndarray, period: int):
    """Weighted outcome sums and weights [O, P] by row and phase, for phases and cell outcomes [O, C]."""
    rows = np.broadcast_to(np.arange(phase.shape[0])[:, None], phase.shape)
    sums, counts = np.zeros((phase.shape[0], period)), np.zeros((phase.shape[0], period))
    np.add.at(sums, (rows, phase), cell_outcomes * weights)
    np.add.at(counts, (rows, phase), np.broadcast_to(weights, phase.shape))
    return sums, counts


def _profiles(design: GridShiftDesign, cell_outcomes: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Accuracy by phase (t - offset) mod P [len(offsets), P] (0 where no prompt reaches a phase)."""
    phase = (design.positions[None, :] - offsets[:, None]) % design.period
    sums, counts = _phase_totals(phase, cell_outcomes, design.weights, design.period)
    return sums / np.maximum(counts, 1e-12)


def _spread(profiles: np.ndarray) -> float:
    return float(np.mean((profiles - profiles.mean(axis=0, keepdims=True)) ** 2))


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
    n_offsets = np.asarray(offsets).size
    if y.ndim != 2 or y.shape != (n_offsets, positions.size):
        raise ValueError(f"outcomes must be [offsets, prompts] = [{n_offsets}, {positions.size}], got shape {y.shape}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    design = GridShiftDesign(positions, offsets, period, units, prompt_ids)
    cell_y = design.pool(y)
    by_grid = _profiles(design, cell_y, design.offsets)
    by_position = _profiles(design, cell_y, np.zeros_like(design.offsets))
    observed, p_value = design.p_value(cell_y, n_shuffles, np.random.default_rng(seed))
    profile, amplitude_ci, blocks = design.amplitude_interval(cell_y, confidence)
    periodic_design = design.periodicity_design()
    periodic_p = float(design.periodicity(cell_y, periodic_design)) if periodic_design.testable else None
    return GridShiftTest(
        period=int(period),
        offsets=[int(o) for o in design.offsets],
        by_grid=(100 * by_grid).round(3).tolist(),
        by_position=(100 * by_position).round(3).tolist(),
        grid_spread_points=float(100 * np.sqrt(_spread(by_grid))),
        position_spread_points=float(100 * np.sqrt(_spread(by_position))),
        p_value=float(p_value),
        n_shuffles=int(n_shuffles),
        moves_with_grid=bool(p_value < alpha and observed > NUMERICAL_ZERO),
        profile_points=[float(v) for v in 100 * profile],
        amplitude_points=float(100 * _amplitude(profile)),
        amplitude_ci=amplitude_ci,
        confidence=float(confidence),
        n_bootstrap=int(n_resamples),
        bootstrap=blocks,
        n_prompts=int(positions.size),
        n_distinct_prompts=design.n_distinct,
        n_units=design.n_units,
        periodic_p_value=periodic_p,
        periodic=None if periodic_p is None else bool(periodic_p < alpha),
    )
