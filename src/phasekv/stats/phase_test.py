r"""A phase test that a smooth effect of position cannot fool: replication across periods.

Why. Residue groups that are matched in the mean and variance of the target position t_K are
not matched in distribution (each group of the moment-matched design puts most of its weight on
one position), so a model whose accuracy merely falls with t_K (a step, a slope, "lost in the
middle") shows a residue pattern, and a uniformity test across residues calls it periodic. A
phase effect differs from such an effect in one way that no design choice can fake: it repeats
in *every* period of P consecutive positions, while a smooth effect is locally linear and a step
happens once.

Statistic. Cut the positions into windows of L consecutive tokens (L the smallest multiple of P
that is at least ``min_window``; windows aligned so that window starts are ≡ 0 mod P). Within each
window, remove each unit's mean (a unit is a mapping or haystack: its difficulty is shared by all
its prompts), pool the window's prompts by position, fit a straight line through the window's
position means (weighted by counts) and keep the residuals e_t. Window k's phase profile is
z_k[φ] = Σ_{t in k, t ≡ φ mod P} sqrt(n_t) e_t, centred over φ (only phase contrasts count).
The statistic is the agreement of the profiles between different windows,

    T = Σ_{k < k'} <z_k, z_k'> = (|Σ_k z_k|² − Σ_k |z_k|²) / 2.

A phase effect adds the same profile to every window, so T grows with the number of window
pairs; a linear trend leaves no residual; curvature within one window is negligible; a step
disturbs the one window that holds it, whose products with the other windows have mean zero.

Null distribution. Each window's profile is a function of that window's prompts only (unit means
are taken within the window), and prompts are independent given the model, so the profiles are
independent. Under "no phase effect" they are also symmetric about zero, except possibly
one window holding a discontinuity. Flipping the sign of whole window profiles (T(ε) =
Σ_{k<k'} ε_k ε_k' <z_k, z_k'>) then leaves the distribution of T unchanged, which calibrates it
without assuming a shape for the position effect: p = #{ε: T(ε) ≥ T} / #ε over all 2^(K−1) sign
patterns (ε and −ε give the same T), or over random patterns when K is large. With K windows the
smallest p-value is 2^−(K−1), so the design must span at least ``MIN_WINDOWS`` windows of
length L to reach p < 0.05; fewer makes the test "not testable", never a verdict.

Every map from outcomes to profiles is linear, so `PhaseDesign` builds it once as a matrix and
tests one outcome vector or a batch of simulated ones (the calibration in the tests) alike.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass

import numpy as np

MIN_WINDOW = 6  # tokens: a window's straight-line fit keeps >= 4 residual degrees of freedom
MIN_WINDOWS = 6  # 2^-(6-1) = 0.031 < 0.05: fewer windows can never reject at 5%
MAX_EXACT_WINDOWS = 13  # up to 2^12 = 4096 sign patterns enumerated exactly; random beyond
N_RANDOM_SIGNS = 4096
_MIN_POSITIONS = 3  # a window needs three distinct positions for a line plus a residual


def window_length(period: int, min_window: int = MIN_WINDOW) -> int:
    """The smallest multiple of `period` that is at least `min_window` tokens."""
    if period < 1:
        raise ValueError(f"period must be >= 1, got {period}")
    return period * -(-min_window // period)


def placebo_periods(stride: int) -> list[int]:
    """Two periods near `stride` that share no factor with it (stride - 1 and stride + 1 when
    they are >= 2): a true stride-S effect should not replicate at them."""
    candidates = [p for p in (stride - 1, stride + 1, stride + 2, stride + 3) if p >= 2 and np.gcd(p, stride) == 1]
    return candidates[:2]


@dataclass(frozen=True)
class PhaseTest:
    """The replication test at one period (see the module docstring).

    ``profile_points[φ]``: estimated accuracy at phase φ minus the mean over phases, after the
    local straight-line trends are removed (percentage points; the count-weighted mean of the
    windows' residuals), ``profile_se_points`` its standard error across windows (None where
    fewer than two windows hold the phase).
    ``amplitude_points``: max - min of the profile. ``testable`` is False when fewer than
    ``MIN_WINDOWS`` windows hold enough positions; then ``p_value`` is 1 and ``note`` says why.
    """

    period: int
    window_length: int
    n_windows: int
    statistic: float
    p_value: float
    n_sign_patterns: int
    exact: bool
    testable: bool
    profile_points: list[float]
    profile_se_points: list[float | None]
    amplitude_points: float
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


class PhaseDesign:
    """The linear map from per-prompt outcomes y [N] to window phase profiles z [K, P].

    ``units`` [N] (mapping or haystack ids), ``positions`` [N] (t_K of each prompt): the design,
    fixed before any outcome is seen, so simulated outcomes can be tested in a batch.
    """

    def __init__(self, units, positions, period: int, min_window: int = MIN_WINDOW):
        units, positions = np.asarray(units), np.asarray(positions)
        if units.ndim != 1 or units.shape != positions.shape or units.size == 0:
            raise ValueError(
                "units and positions must be non-empty 1-D arrays of equal length, "
                f"got {units.shape} and {positions.shape}"
            )
        if not np.issubdtype(positions.dtype, np.integer):
            raise ValueError(f"positions must be integers (token indices), got dtype {positions.dtype}")
        self.period, self.window_length = int(period), window_length(period, min_window)
        self.n_prompts = units.size
        origin = positions.min() - positions.min() % self.period
        window = (positions - origin) // self.window_length
        # blocks = (unit, window): removing block means keeps every window's profile its own
        _, self._block_index = np.unique(np.stack([units, window]), axis=1, return_inverse=True)
        rows, self.window_counts, self.residual_maps = [], [], []
        for k in np.unique(window):
            members = np.flatnonzero(window == k)
            pos, slot = np.unique(positions[members], return_inverse=True)
            if pos.size < _MIN_POSITIONS:
                continue
            counts = np.bincount(slot).astype(float)
            mean_map = np.zeros((pos.size, self.n_prompts))  # position means from outcomes
            mean_map[slot, members] = 1.0 / counts[slot]
            residual = _line_residual_map(pos, counts) @ mean_map  # e_t = (I - H) ybar
            fold = np.zeros((self.period, pos.size))
            fold[pos % self.period, np.arange(pos.size)] = np.sqrt(counts)
            fold -= fold.mean(axis=0, keepdims=True)  # phase contrasts only
            rows.append(fold @ residual)
            self.residual_maps.append((pos % self.period, counts, residual))
            self.window_counts.append(int(counts.sum()))
        self.n_windows = len(rows)
        matrix = np.stack(rows) if rows else np.zeros((0, self.period, self.n_prompts))
        # outcomes enter after removing block means: z = A (y - block mean) = (A - A M_b) y
        sizes = np.bincount(self._block_index).astype(float)
        block_sums = np.zeros(matrix.shape[:2] + (sizes.size,))
        np.add.at(block_sums, (slice(None), slice(None), self._block_index), matrix)
        self.matrix = matrix - (block_sums / sizes)[..., self._block_index]  # [K, P, N]

    @property
    def testable(self) -> bool:
        return self.n_windows >= MIN_WINDOWS

    def profiles(self, outcomes) -> np.ndarray:
        """z for outcomes [..., N] (0/1 or fractions): shape [..., K, P]."""
        y = np.asarray(outcomes, dtype=float)
        if y.shape[-1] != self.n_prompts:
            raise ValueError(f"outcomes must have {self.n_prompts} entries on the last axis, got {y.shape}")
        return np.einsum("kpn,...n->...kp", self.matrix, y)

    def sign_patterns(self, seed: int = 0) -> tuple[np.ndarray, bool]:
        """(sign patterns [n, K] with the identity first, whether they are all 2^(K-1))."""
        k = self.n_windows
        if k <= 1:
            return np.ones((1, k)), True
        if k <= MAX_EXACT_WINDOWS:
            rest = np.array(list(itertools.product((1.0, -1.0), repeat=k - 1))).reshape(-1, k - 1)
            return np.hstack([np.ones((len(rest), 1)), rest]), True
        signs = np.random.default_rng(seed).choice((-1.0, 1.0), size=(N_RANDOM_SIGNS + 1, k))
        signs[0] = 1.0
        return signs, False

    def p_values(self, outcomes, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """(statistic T, p-value) for outcomes [..., N]; p = 1 where the design is not testable."""
        z = self.profiles(outcomes)  # [..., K, P]
        batch = z.shape[:-2]
        z = z.reshape(-1, *z.shape[-2:])
        signs, _ = self.sign_patterns(seed)
        own = (z**2).sum(axis=(1, 2))
        stats, p = np.empty(len(z)), np.ones(len(z))
        chunk = max(1, (1 << 24) // max(1, len(signs) * z.shape[-1]))
        for start in range(0, len(z), chunk):
            block = z[start : start + chunk]
            totals = np.einsum("sk,bkp->bsp", signs, block)
            t = 0.5 * ((totals**2).sum(axis=2) - own[start : start + chunk, None])  # [b, patterns]
            stats[start : start + chunk] = t[:, 0]
            if self.testable:
                tolerance = 1e-9 * np.maximum(1.0, np.abs(t[:, :1]))
                p[start : start + chunk] = (t >= t[:, :1] - tolerance).mean(axis=1)
        return stats.reshape(batch), p.reshape(batch)

    def test(self, outcomes, seed: int = 0) -> PhaseTest:
        """The test for one outcome vector [N], with the estimated phase profile."""
        y = np.asarray(outcomes, dtype=float)
        if y.ndim != 1:
            raise ValueError(f"test takes one outcome vector [N], got shape {y.shape}")
        if np.any((y < 0) | (y > 1)) or np.isnan(y).any():
            raise ValueError("outcomes must be 0/1 or fractions in [0, 1]")
        statistic, p_value = (float(v) for v in self.p_values(y, seed))
        profile, se = self._profile(y)
        signs, exact = self.sign_patterns(seed)
        note = ""
        if not self.testable:
            note = (
                f"not testable: the target positions span {self.n_windows} window(s) of {self.window_length} "
                f"tokens with >= {_MIN_POSITIONS} positions, fewer than the {MIN_WINDOWS} needed to reach "
                f"p < 0.05; widen the design (more spread blocks or a larger modulus)"
            )
        return PhaseTest(
            period=self.period,
            window_length=self.window_length,
            n_windows=self.n_windows,
            statistic=statistic,
            p_value=p_value,
            n_sign_patterns=int(len(signs)),
            exact=bool(exact),
            testable=self.testable,
            profile_points=[float(v) for v in 100 * profile],
            profile_se_points=[None if np.isnan(v) else float(v) for v in 100 * se],
            amplitude_points=float(100 * (profile.max() - profile.min())) if profile.size else 0.0,
            note=note,
        )

    def _profile(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Count-weighted mean over windows of the residual at each phase, centred; SE over windows."""
        if not self.residual_maps:
            return np.zeros(self.period), np.full(self.period, np.nan)
        block_means = np.bincount(self._block_index, y) / np.bincount(self._block_index)
        centred = y - block_means[self._block_index]
        per_window = np.zeros((self.n_windows, self.period))
        weights = np.zeros((self.n_windows, self.period))
        for k, (phase, counts, residual) in enumerate(self.residual_maps):
            np.add.at(per_window[k], phase, counts * (residual @ centred))
            np.add.at(weights[k], phase, counts)
        with np.errstate(invalid="ignore", divide="ignore"):
            window_profile = per_window / weights
            window_profile -= np.nanmean(window_profile, axis=1, keepdims=True)
            total = weights.sum(axis=0)
            profile = np.nansum(np.where(weights > 0, window_profile * weights, 0.0), axis=0) / total
            seen = (weights > 0).sum(axis=0)
            deviations = np.where(weights > 0, window_profile - np.nansum(window_profile, axis=0) / seen, 0.0)
            se = np.sqrt((deviations**2).sum(axis=0) / (seen - 1) / seen)  # NaN where one window saw it
        return profile - profile.mean(), se


def _line_residual_map(positions: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """I - H for the count-weighted least-squares line through points at `positions`: [n, n]."""
    x = np.stack([np.ones(positions.size), positions - positions.mean()], axis=1)
    w = counts / counts.sum()
    hat = x @ np.linalg.solve(x.T @ (w[:, None] * x), (w[:, None] * x).T)
    return np.eye(positions.size) - hat


def phase_test(units, positions, outcomes, period: int, seed: int = 0, min_window: int = MIN_WINDOW) -> PhaseTest:
    """The replication phase test of one run (see the module docstring)."""
    return PhaseDesign(units, positions, period, min_window).test(outcomes, seed)
