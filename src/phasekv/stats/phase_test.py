r"""A phase test that a smooth effect of position cannot fool, at any sample size: the phase
frequencies against their neighbours.

Why. Residue groups that are matched in the mean and variance of the target position t_K are
not matched in distribution, so a model whose accuracy merely changes with t_K (a cliff, a
slope, a U, recency) shows a residue pattern. Removing a straight line inside short windows is
not enough either: curvature leaves the same residual in every window, and a test calibrated by
the windows' own variability becomes surer of that false alarm as the data grow. What tells a
phase effect apart from any effect of position is where it puts its power along the position
axis: a pattern that repeats every P tokens lives *exactly* at the frequencies k/P
(k = 1 .. P/2), while an effect that does not repeat spreads its power over a continuum of
frequencies, so frequencies next to k/P carry as much of it as k/P itself.

Model. Per-prompt outcomes y (0/1, or fractions for expected accuracies) are pooled into cells
(unit, position); a unit is a mapping or haystack, whose difficulty all its prompts share.
Identical prompts (the same tokens: ``prompt_ids``) are one observation, however often a design
repeats them. The cell means are fitted by weighted least squares (weights: distinct prompts) with

    each unit's own level and smooth curve (cubic B-splines of position, knots (2 + 1/pi) P apart)
    + sinusoids at the phase frequencies k/P (P - 1 columns: the phase profile), and the same times
      position (a phase effect whose size drifts along the span)
    + sinusoids at neighbouring frequencies k/P ± j/D (j = 2 .. J + 1, D the span of positions).

Statistic. For each phase frequency, W_phase is the Wald statistic of its phase terms given all
neighbours and W_near the Wald statistic of its own neighbours, both with the exact sampling
covariance of independent Bernoulli outcomes (p(1-p) of the phase-free fit, floored away from 0 and
1). Under "no phase effect" the two are independent chi-squares, so
F_k = (W_phase / df) / (W_near / df_near) ~ F(df, df_near), and the p-values of the frequencies
are combined by Fisher's method. A smooth effect that the splines do not absorb raises both in
proportion to its power near k/P, so F stays near 1 however many prompts there are; a phase effect
raises only W_phase, and its share grows with the data. The phase profile (accuracy at each phase
minus the mean over phases) is read off the profile columns of the model without neighbours,
bounded so that every phase's accuracy lies in [0, 100]%, and its amplitude (best minus worst
phase) gets a basic bootstrap interval over units.

Assumption, in one sentence: the test tolerates effects of position that are smooth on scales of
about 2P tokens or longer, shared by the units or each unit's own (trends, U shapes, recency and
primacy with tau >= 2P, transitions); effects with features at the scale of the period or shorter
(walls or cliffs within a period, recency with tau < 2P, a pattern that repeats every P ± P^2/D
tokens) are outside it and may be rejected, which the verdict's minimum effect then has to catch;
with a span below ``MIN_PERIODS`` periods it is not testable.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from fractions import Fraction

import numpy as np
from scipy import stats as scipy_stats
from scipy.interpolate import BSpline

from .amplitude import ordered_pairs, simultaneous_amplitude_bounds

KNOT_SPACING = 2 + 1 / np.pi  # periods between the knots of the smooth part
MIN_PERIODS = 4  # the span must hold this many periods for neighbours to be told from the phase frequencies
VARIANCE_FLOOR = 0.01  # fitted accuracies are kept in [0.01, 0.99] for the Bernoulli variance
N_BOOTSTRAP = 1000
NUMERICAL_ZERO = 1e-9  # a Wald statistic below this is rounding error
METHOD = (
    "phase frequencies against their neighbours: each unit's level and smooth curve (cubic B-splines of position) "
    "and sinusoids at k/P and at "
    "neighbouring frequencies fitted to distinct prompts; F = (Wald of the phase terms / (P-1)) / (Wald of the "
    "neighbours / df), Bernoulli variance (phasekv.stats.phase_test)"
)


@dataclass(frozen=True)
class PhaseTest:
    """The test at one period (see the module docstring).

    ``profile_points[φ]``: accuracy at phase φ minus the mean over phases (percentage points, bounded so that
    every phase's accuracy lies in [0, 100]); ``profile_se_points`` its standard error;
    ``phase_accuracy_points[φ]`` the bounded accuracy at phase φ itself (the run's mean plus the phase's offset).
    ``amplitude_points``: best minus worst phase, ``amplitude_ci`` its basic bootstrap interval over units
    (a parametric bootstrap when the design has one unit). ``testable`` is False when the positions span
    fewer than ``MIN_PERIODS`` periods; then ``p_value`` is 1 and ``note`` says why.
    """

    period: int
    statistic: float
    p_value: float
    df: list[int]
    testable: bool
    n_prompts: int
    n_distinct_prompts: int
    n_units: int
    span: list[int]
    neighbour_frequencies: list[float]
    profile_points: list[float]
    profile_se_points: list[float]
    phase_accuracy_points: list[float]
    amplitude_points: float
    amplitude_ci: list[float] | None
    mean: float
    mean_ci: list[float] | None
    confidence: float
    n_bootstrap: int
    bootstrap: str
    method: str = METHOD
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def distinct_groups(prompt_ids, n: int) -> np.ndarray:
    """Index of each prompt's distinct prompt [n]: equal ids are one prompt (None: all distinct)."""
    if prompt_ids is None:
        return np.arange(n)
    ids = np.asarray(prompt_ids)
    if ids.shape != (n,):
        raise ValueError(f"prompt_ids must have one entry per prompt ({n}), got shape {ids.shape}")
    return np.unique(ids, return_inverse=True)[1].ravel()


def phase_frequencies(period: int) -> list[tuple[float, bool]]:
    """(frequency k/P, whether it has a sine column) for k = 1 .. P/2: the P - 1 phase-contrast columns."""
    return [(k / period, 2 * k != period) for k in range(1, period // 2 + 1)]


def neighbours_per_frequency(period: int, span: int, n_neighbours: int | None = None) -> list[list[float]]:
    """For each phase frequency k/P, its neighbours k/P ± j/span (j = 1 .. J) that lie strictly between the
    smooth part (1.5/span) and 1/2 and at least half a step 1/span from every phase frequency and from each
    other. J (None) grows with the periods in the span: 2 to 4.

    Worked in exact fractions: a neighbour exactly on a half-step bound is common (P 6, span 27), and floats
    would decide such ties by rounding, dropping neighbours the rule keeps."""
    if n_neighbours is None:
        n_neighbours = max(2, min(4, span // (2 * period) - 1))
    step = Fraction(1, span)
    targets = [Fraction(k, period) for k in range(1, period // 2 + 1)]
    chosen: list[Fraction] = []
    groups = []
    for f in targets:
        group = []
        for j in range(2, n_neighbours + 2):
            for g in (f - j * step, f + j * step):
                if not 3 * step / 2 <= g < Fraction(1, 2) - step / 4:
                    continue
                if min(abs(g - t) for t in targets) < 3 * step / 2 or any(abs(g - c) < step / 2 for c in chosen):
                    continue
                chosen.append(g)
                group.append(g)
        groups.append([float(g) for g in sorted(group)])
    return groups


def smooth_basis(positions: np.ndarray, span: tuple[int, int], period: int) -> np.ndarray:
    """Cubic B-splines of position with knots ``KNOT_SPACING`` periods apart over the span, less one column
    (the unit effects hold the constant): [n, columns].

    Knots that are 2P apart would leave an approximation error that repeats every 2P, which has a harmonic
    at 1/P; a spacing of (2 + 1/pi) P shares no harmonic with k/P for any small k."""
    low, high = span[0] - 0.5, span[1] + 0.5
    intervals = max(1, int(np.ceil((high - low) / (KNOT_SPACING * period))))
    inner = np.linspace(low, high, intervals + 1)
    knots = np.concatenate([[low] * 3, inner, [high] * 3])
    basis = BSpline.design_matrix(np.clip(positions, low, high), knots, 3).toarray()
    return basis[:, 1:]


def _wald(estimate: np.ndarray, covariance: np.ndarray) -> np.ndarray:
    """estimate' covariance^-1 estimate for a batch: [B, k], [B, k, k] -> [B]."""
    return np.einsum("bk,bk->b", estimate, (np.linalg.pinv(covariance) @ estimate[..., None])[..., 0])


def _sinusoids(positions: np.ndarray, frequencies, with_sine) -> np.ndarray:
    columns = []
    for f, sine in zip(frequencies, with_sine, strict=True):
        angle = 2 * np.pi * f * positions
        columns.append(np.cos(angle))
        if sine:
            columns.append(np.sin(angle))
    return np.stack(columns, axis=1) if columns else np.zeros((positions.size, 0))


class PhaseDesign:
    """The fixed part of the test: cells, the regression columns and their Gram matrices.

    ``units`` [N] (mapping or haystack ids), ``positions`` [N] (t_K of each prompt, integers),
    ``prompt_ids`` [N] (optional: equal ids are identical prompts and count once). Fixed before any outcome
    is seen, so simulated outcomes can be tested in a batch (`evaluate`).
    """

    def __init__(self, units, positions, period: int, prompt_ids=None, n_neighbours: int | None = None):
        units, positions = np.asarray(units), np.asarray(positions)
        if units.ndim != 1 or units.shape != positions.shape or units.size == 0:
            raise ValueError(
                "units and positions must be non-empty 1-D arrays of equal length, "
                f"got {units.shape} and {positions.shape}"
            )
        if not np.issubdtype(positions.dtype, np.integer):
            raise ValueError(f"positions must be integers (token indices), got dtype {positions.dtype}")
        if int(period) != period or period < 2:
            raise ValueError(f"the phase test needs an integer period >= 2, got {period!r}")
        self.period, self.n_prompts = int(period), units.size
        distinct = distinct_groups(prompt_ids, units.size)
        first = np.unique(distinct, return_index=True)[1]
        if np.any(units[first][distinct] != units) or np.any(positions[first][distinct] != positions):
            raise ValueError("identical prompts (equal prompt_ids) must have the same unit and target position")
        self._distinct, self.n_distinct = distinct, first.size
        unit_ids, unit_index = np.unique(units[first], return_inverse=True)
        self.n_units = unit_ids.size
        # cells (unit, position) of distinct prompts, sorted by unit
        keys = np.stack([unit_index.ravel(), positions[first]], axis=1)
        cells, self._cell_of_distinct, counts = np.unique(keys, axis=0, return_inverse=True, return_counts=True)
        self._cell_of_distinct = self._cell_of_distinct.ravel()
        self.cell_unit, self.cell_position, self.cell_count = cells[:, 0], cells[:, 1], counts.astype(float)
        low, high = int(positions.min()), int(positions.max())
        self.span = (low, high)
        width = high - low + 1
        self.testable = width >= MIN_PERIODS * self.period and self.n_distinct > 0
        targets = phase_frequencies(self.period)
        near_groups = neighbours_per_frequency(self.period, width, n_neighbours) if self.testable else []
        self.neighbours = [f for group in near_groups for f in group]
        # column indices (within the phase block, within the neighbour block) of each phase frequency
        # the phase block: P - 1 columns of the profile, then the same times position (a phase effect whose
        # size drifts along the span puts sidebands at k/P +- 1/D; these columns hold them)
        self.n_profile = self.period - 1
        self.groups, phase_start, near_start = [], 0, 0
        for (_, sine), group in zip(targets, near_groups, strict=False):
            own = list(range(phase_start, phase_start + 1 + sine))
            self.groups.append(
                (own + [self.n_profile + i for i in own], list(range(near_start, near_start + 2 * len(group))))
            )
            phase_start, near_start = phase_start + 1 + sine, near_start + 2 * len(group)
        if self.testable and any(not near for _, near in self.groups):
            self.testable = False
        t = self.cell_position.astype(float)
        profile_columns = _sinusoids(t, [f for f, _ in targets], [s for _, s in targets])
        drift = (t - (low + high) / 2) / max((high - low) / 2, 1.0)
        phase = np.concatenate([profile_columns, profile_columns * drift[:, None]], axis=1)
        near = _sinusoids(t, self.neighbours, [True] * len(self.neighbours))
        self.n_phase, self.n_near = phase.shape[1], near.shape[1]
        self.cell_weight = self.cell_count  # least-squares weight: distinct prompts per cell
        self._unit_starts = np.flatnonzero(np.r_[True, np.diff(self.cell_unit) != 0])  # cells are sorted by unit
        self._unit_counts = np.bincount(self.cell_unit, self.cell_count)
        # each unit's own level and smooth curve (a constant and the B-splines of position, fitted per unit)
        # enter by residualising every column within its unit: Frisch-Waugh
        self._unit_fits = self._unit_projections(smooth_basis(t, self.span, self.period))
        self.columns = np.concatenate([phase, near], axis=1)
        self.columns = self.columns - self._unit_fit(self.columns)  # [C, d]
        weighted = self.columns * self.cell_weight[:, None]
        self.unit_gram = np.zeros((self.n_units, self.columns.shape[1], self.columns.shape[1]))
        np.add.at(self.unit_gram, self.cell_unit, weighted[:, :, None] * self.columns[:, None, :])
        self.gram = self.unit_gram.sum(axis=0)
        self._inverse = np.linalg.pinv(self.gram)
        self._outer = (self.columns[:, :, None] * self.columns[:, None, :]).reshape(self.columns.shape[0], -1)
        # phase values from the phase columns: accuracy offset at phase r = rows @ coefficients
        self.phase_rows = _sinusoids(
            np.arange(self.period, dtype=float), [f for f, _ in targets], [s for _, s in targets]
        )  # [P, P-1]
        self.df = [self.n_phase, self.n_near]

    def _unit_projections(self, smooth: np.ndarray) -> list[tuple[slice, np.ndarray]]:
        """Per unit: (its cells, the weighted least-squares hat matrix of [1, smooth] on them [c_u, c_u])."""
        ends = np.r_[self._unit_starts[1:], self.cell_unit.size]
        fits = []
        for start, end in zip(self._unit_starts, ends, strict=True):
            basis = np.hstack([np.ones((end - start, 1)), smooth[start:end]])
            w = self.cell_weight[start:end]
            solve = np.linalg.pinv(basis.T @ (w[:, None] * basis)) @ (basis.T * w)
            fits.append((slice(start, end), basis @ solve))
        return fits

    def _unit_fit(self, values: np.ndarray) -> np.ndarray:
        """Each unit's level and smooth curve fitted to cell values [C] or [C, d]."""
        out = np.empty_like(values, dtype=float)
        for cells, hat in self._unit_fits:
            out[cells] = hat @ values[cells]
        return out

    def _batch_unit_fit(self, values: np.ndarray) -> np.ndarray:
        """The same for a batch of cell values [B, C]."""
        out = np.empty_like(values, dtype=float)
        for cells, hat in self._unit_fits:
            out[:, cells] = values[:, cells] @ hat.T
        return out

    def power_base(self, outcomes) -> np.ndarray:
        """The phase-free accuracy of every cell that a run's power is simulated on, in [0, 1]: each unit's level
        and one smooth curve of position shared by the units. Not each unit's own curve (the test's): fitted to a few
        0/1 outcomes, follows their noise, and cells fitted nearer 0 or 1 than they are have less Bernoulli variance
        than the run had, so an MDE simulated on them comes out too small (planted back at that size, a drop was
        found in about 70% of runs, not 80%)."""
        return self.shared_smooth_fit(self.cell_sums(np.asarray(outcomes, dtype=float)) / self.cell_count)

    def shared_smooth_fit(self, means: np.ndarray) -> np.ndarray:
        """Cell means [C] -> each unit's level plus one smooth curve shared by the units, in [0, 1] [C]."""
        units = self.cell_unit
        level = (np.bincount(units, self.cell_weight * means) / self._unit_counts)[units]
        smooth = smooth_basis(self.cell_position.astype(float), self.span, self.period)
        unit_mean = (
            np.stack([np.bincount(units, self.cell_weight * c) for c in smooth.T], 1) / self._unit_counts[:, None]
        )
        centred = smooth - unit_mean[units]  # within units: the levels hold each unit's mean
        root = np.sqrt(self.cell_weight)[:, None]
        coef = np.linalg.lstsq(root * centred, root[:, 0] * (means - level), rcond=None)[0]
        return np.clip(level + centred @ coef, 0.0, 1.0)

    def cell_sums(self, outcomes) -> np.ndarray:
        """Outcomes [..., N] (0/1 or fractions in [0, 1]) -> sums over each cell's distinct prompts [..., C].

        Identical prompts share one outcome: their mean is taken (a deterministic model gives them one)."""
        y = np.asarray(outcomes, dtype=float)
        if y.shape[-1] != self.n_prompts:
            raise ValueError(f"outcomes must have {self.n_prompts} entries on the last axis, got {y.shape}")
        if np.isnan(y).any() or np.any((y < 0) | (y > 1)):
            raise ValueError("outcomes must be 0/1 or fractions in [0, 1]")
        flat = y.reshape(-1, self.n_prompts)
        per_distinct = np.zeros((flat.shape[0], self.n_distinct))
        np.add.at(per_distinct.T, self._distinct, flat.T)
        per_distinct /= np.bincount(self._distinct)
        sums = np.zeros((flat.shape[0], self.cell_count.size))
        np.add.at(sums.T, self._cell_of_distinct, per_distinct.T)
        return sums.reshape(*y.shape[:-1], -1)

    def evaluate(self, sums: np.ndarray) -> dict[str, np.ndarray]:
        """The test for cell sums [B, C]: F statistic, p-value, coefficients [B, d], phase profile [B, P]
        (unbounded offsets, proportions) and its covariance diagonal, and the mean [B]."""
        sums = np.atleast_2d(sums)
        means = sums / self.cell_count
        null_fit = self._batch_unit_fit(means)  # the phase-free model: each unit's level and smooth curve
        rhs = (self.cell_weight * (means - null_fit)) @ self.columns  # X' W (ybar - null fit) [B, d]
        inverse = self._inverse  # a pseudo-inverse: a small design can make columns collinear
        coef = rhs @ inverse.T
        # the Bernoulli variance of the phase-free model, as a score test takes it
        fitted = np.clip(null_fit, VARIANCE_FLOOR, 1 - VARIANCE_FLOOR)
        shared = self._shared_cell_variance(means - null_fit - coef @ self.columns.T, fitted)  # [B]
        # of w * ybar per cell: Bernoulli, plus what the prompts of a cell share beyond their accuracy
        variance = self.cell_weight**2 * (
            fitted * (1 - fitted) / self.cell_count + shared[:, None] * (1 - 1 / self.cell_count)
        )
        d = self.columns.shape[1]
        meat = (variance @ self._outer).reshape(-1, d, d)
        cov = inverse @ meat @ inverse  # [B, d, d]
        statistic, p_value, p_parts = self._frequency_tests(coef, cov)
        # the effect size comes from the model without the neighbours: they calibrate the test, and leaving
        # them in would only add their collinearity to the profile's noise
        k = self.n_profile
        inverse_r = np.linalg.pinv(self.gram[:k, :k])
        reduced = rhs[:, :k] @ inverse_r.T
        v_phase = inverse_r @ meat[:, :k, :k] @ inverse_r
        profile = reduced @ self.phase_rows.T  # [B, P]
        profile_var = np.einsum("pi,bij,pj->bp", self.phase_rows, v_phase, self.phase_rows)
        mean = sums.sum(axis=1) / self.cell_count.sum()
        return {
            "statistic": statistic,
            "p_value": p_value,
            "coef": reduced,
            "profile": profile,
            "profile_var": profile_var,
            "mean": mean,
            "frequency_p_values": p_parts,
            "coef_cov": v_phase,
            "coef_cov_units": self._unit_robust_cov(means - null_fit, reduced, inverse_r),
        }

    def _shared_cell_variance(self, residual: np.ndarray, fitted: np.ndarray) -> np.ndarray:
        """The variance [B] that the prompts of one cell share beyond their Bernoulli noise (a mapping hard at one
        position, a template that trips at it), by moments over the cells with two prompts or more: a cell mean of
        n prompts varies by p(1-p)/n + tau^2 (1 - 1/n). 0 when the residuals show none. Left out, cells of many
        prompts would be taken for far surer than they are, and unequally so, which the neighbours do not cancel
        (the test alone rejected 18% of phase-free runs at 16x the in-sequence design with tau^2 = 0.3 p(1-p))."""
        several = self.cell_count >= 2
        if not several.any():
            return np.zeros(len(residual))
        n = self.cell_count[several]
        excess = residual[:, several] ** 2 - fitted[:, several] * (1 - fitted[:, several]) / n
        return np.maximum(excess.sum(axis=1) / (1 - 1 / n).sum(), 0.0)

    def _unit_robust_cov(self, residual: np.ndarray, coef: np.ndarray, inverse: np.ndarray) -> np.ndarray | None:
        """The profile coefficients' covariance [B, k, k] from the units' own scatter (cluster-robust, CR1), or
        None with one unit: it holds what the Bernoulli covariance does not, prompts of a unit or a cell that
        agree beyond their accuracies (a mapping that is hard at some phases only, shared difficulty)."""
        if self.n_units < 2:
            return None
        k = self.n_profile
        columns = self.columns[:, :k]
        error = residual - coef @ columns.T  # [B, C]: what the profile leaves of each cell's mean
        scores = np.add.reduceat((self.cell_weight * error)[:, :, None] * columns[None], self._unit_starts, axis=1)
        meat = np.einsum("bui,buj->bij", scores, scores) * self.n_units / (self.n_units - 1)
        return inverse @ meat @ inverse

    def _frequency_tests(self, coef: np.ndarray, cov: np.ndarray):
        """(Fisher statistic [B], p-value [B], per-frequency p-values [B, K]) from the full model's coefficients
        and covariance; p = 1 when the design is not testable."""
        if not self.testable:
            ones = np.ones(len(coef))
            return 0.0 * ones, ones, np.ones((len(coef), 0))
        a, b = 0, self.n_phase
        phase, near = coef[:, a:b], coef[:, b:]
        v_pp, v_pn, v_nn = cov[:, a:b, a:b], cov[:, a:b, b:], cov[:, b:, b:]
        gain = v_pn @ np.linalg.pinv(v_nn)  # the part of the phase estimate its neighbours predict
        adjusted = phase - np.einsum("bpn,bn->bp", gain, near)
        v_adjusted = v_pp - gain @ np.swapaxes(v_pn, 1, 2)
        # each phase frequency against its own neighbours: the power of a smooth effect changes along the
        # frequency axis, so one pooled noise level would be too low near 1/P and too high near 1/2
        p_parts = []
        for phase_cols, near_cols in self.groups:
            w_phase = _wald(adjusted[:, phase_cols], v_adjusted[:, phase_cols][:, :, phase_cols])
            w_near = _wald(near[:, near_cols], v_nn[:, near_cols][:, :, near_cols])
            with np.errstate(invalid="ignore", divide="ignore"):
                ratio = (w_phase / len(phase_cols)) / (w_near / len(near_cols))
            # a phase part at the level of rounding error is no evidence, whatever its ratio to the neighbours'
            ratio = np.where(np.isfinite(ratio) & (w_phase > NUMERICAL_ZERO), ratio, 0.0)
            p_parts.append(scipy_stats.f.sf(ratio, len(phase_cols), len(near_cols)))
        p_parts = np.clip(np.stack(p_parts, axis=1), 1e-300, 1.0)  # [B, K]
        statistic = -2 * np.log(p_parts).sum(axis=1)  # Fisher's combination over the phase frequencies
        return statistic, scipy_stats.chi2.sf(statistic, 2 * p_parts.shape[1]), p_parts

    def amplitude_bounds(self, result: dict, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
        """(lower [B], upper [B]) of the phase amplitude (proportions) of evaluated runs (`evaluate`'s dict):
        simultaneous over the pairs of phases (`amplitude.simultaneous_amplitude_bounds`), each difference of two
        phases with the larger of its Bernoulli variance and, with several units, its variance from the units' own
        scatter (on n_units - 1 degrees of freedom)."""
        a, b = ordered_pairs(self.period)
        contrast = self.phase_rows[a] - self.phase_rows[b]  # [pairs, k]
        variances = [(np.einsum("pi,bij,pj->bp", contrast, result["coef_cov"], contrast), np.inf)]
        if result.get("coef_cov_units") is not None:
            units = np.einsum("pi,bij,pj->bp", contrast, result["coef_cov_units"], contrast)
            variances.append((units, float(self.n_units - 1)))
        return simultaneous_amplitude_bounds(result["coef"] @ self.phase_rows.T, variances, confidence)

    def bootstrap_means(self, sums: np.ndarray, n_resamples: int = N_BOOTSTRAP, seed: int = 0) -> np.ndarray:
        """Mean accuracies [B, R] of resampled designs for cell sums [B, C]: units drawn with replacement (a
        parametric resample of the cells when the design has one unit)."""
        sums = np.atleast_2d(sums)
        rng = np.random.default_rng(seed)
        if self.n_units >= 2:
            draws = rng.integers(0, self.n_units, size=(n_resamples, self.n_units))
            weights = np.stack([np.bincount(row, minlength=self.n_units) for row in draws]).astype(float)
            unit_sums = np.add.reduceat(sums, self._unit_starts, axis=1)  # [B, U]
            return (weights @ unit_sums.T).T / (weights @ self._unit_counts)[None]
        fitted = np.clip(sums / self.cell_count, 0, 1)
        counts = self.cell_count.astype(int)
        return (
            np.stack(
                [rng.binomial(counts[None], row[None], size=(n_resamples, row.size)).sum(axis=1) for row in fitted]
            )
            / self.cell_count.sum()
        )

    def test(self, outcomes, seed: int = 0, n_resamples: int = N_BOOTSTRAP, confidence: float = 0.95) -> PhaseTest:
        """The test for one outcome vector [N], with the bounded phase profile and its amplitude interval."""
        y = np.asarray(outcomes, dtype=float)
        if y.ndim != 1:
            raise ValueError(f"test takes one outcome vector [N], got shape {y.shape}")
        sums = self.cell_sums(y)[None]
        full = self.evaluate(sums)
        result = {k: None if v is None else v[0] for k, v in full.items()}
        mean = float(result["mean"])
        bounded = bounded_profile(result["profile"], mean)
        observed = float(bounded.max() - bounded.min())
        amplitude_ci = mean_ci = None
        if n_resamples:
            low, high = (float(v[0]) for v in self.amplitude_bounds(full, confidence))
            # the point estimate is bounded (phases kept in [0, 100]%), the bounds are not: keep it inside them
            amplitude_ci = [100 * min(low, observed), 100 * max(high, observed)]
            tail = (1 - confidence) / 2
            boot_means = self.bootstrap_means(sums, n_resamples, seed)[0]
            mean_ci = [float(v) for v in np.quantile(boot_means, [tail, 1 - tail])]
        note = ""
        if not self.testable:
            note = (
                f"not testable: the target positions span {self.span[1] - self.span[0] + 1} tokens, fewer than "
                f"{MIN_PERIODS} periods of {self.period}; widen the design (more spread blocks or a larger modulus)"
            )
        return PhaseTest(
            period=self.period,
            statistic=float(result["statistic"]),
            p_value=float(result["p_value"]),
            df=[int(v) for v in self.df],
            testable=bool(self.testable),
            n_prompts=int(self.n_prompts),
            n_distinct_prompts=int(self.n_distinct),
            n_units=int(self.n_units),
            span=[int(v) for v in self.span],
            neighbour_frequencies=[round(float(f), 6) for f in self.neighbours],
            profile_points=[float(v) for v in 100 * bounded],
            phase_accuracy_points=[float(v) for v in 100 * np.clip(mean + result["profile"], 0.0, 1.0)],
            profile_se_points=[float(v) for v in 100 * np.sqrt(np.maximum(result["profile_var"], 0))],
            amplitude_points=100 * observed,
            amplitude_ci=amplitude_ci,
            mean=mean,
            mean_ci=mean_ci,
            confidence=float(confidence),
            n_bootstrap=int(n_resamples),
            bootstrap="units" if self.n_units >= 2 else "parametric (one unit)",
            note=note,
        )


def basic_interval(observed: float, draws: np.ndarray, confidence: float) -> list[float]:
    """Basic (reverse percentile) bootstrap interval of an amplitude, clipped to [0, 1]: a max - min over
    noisy phases is biased upwards, and so are its resamples; the basic interval subtracts that bias once."""
    tail = (1 - confidence) / 2
    q_low, q_high = np.quantile(draws, [tail, 1 - tail], axis=-1)
    return [float(np.clip(2 * observed - q_high, 0, 1)), float(np.clip(2 * observed - q_low, 0, 1))]


def bounded_profile(profile: np.ndarray, mean) -> np.ndarray:
    """Phase offsets [..., P] as accuracy at each phase minus their mean, with every phase's accuracy kept
    in [0, 1] (a linear fit can put a weak phase below 0 when the mean is low)."""
    accuracy = np.clip(np.asarray(mean)[..., None] + profile, 0.0, 1.0)
    return accuracy - accuracy.mean(axis=-1, keepdims=True)


def amplitude(profile: np.ndarray, mean) -> np.ndarray:
    """Best minus worst phase of the bounded profile (proportions)."""
    bounded = bounded_profile(profile, mean)
    return bounded.max(axis=-1) - bounded.min(axis=-1)


def placebo_periods(stride: int) -> list[int]:
    """Two periods near `stride` that share no factor with it (stride - 1 and stride + 1 when
    they are >= 2): a true stride-S effect should not show at them."""
    candidates = [p for p in (stride - 1, stride + 1, stride + 2, stride + 3) if p >= 2 and np.gcd(p, stride) == 1]
    return candidates[:2]


def phase_test(
    units, positions, outcomes, period: int, seed: int = 0, prompt_ids=None, n_resamples: int = N_BOOTSTRAP
) -> PhaseTest:
    """The phase test of one run (see the module docstring)."""
    return PhaseDesign(units, positions, period, prompt_ids).test(outcomes, seed, n_resamples)
