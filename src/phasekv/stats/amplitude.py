"""An interval for a phase amplitude (best minus worst phase) that covers as it says, at any effect size.

Why not a bootstrap of max - min: the maximum of noisy differences is biased upwards, and so are its resamples, so
a basic or percentile interval misses the truth far more often than it says (with no effect, such a lower bound sat
above 0 in up to 39% of simulated runs, and a true 5-point amplitude was called phase-sensitive in 5-6%).

Instead the bounds are simultaneous over the ordered pairs (a, b) of phases, from each difference d_ab of the
estimated profile and its standard error s_ab:

    lower = max over pairs of (d_ab - q s_ab),   q: the studentized range of P means at 1 - (1 - confidence) / 2,
                                                 over sqrt 2 (every pair's error stays under it together)
    upper = max over pairs of (d_ab + z s_ab),   z: one pair's quantile at 1 - (1 - confidence) / 2

The lower bound passes the true amplitude only when some pair's error passes its margin, which happens in at most
(1 - confidence) / 2 of runs however the phases tie; the upper bound stays below it only when the pair that makes
the true amplitude misses its one-sided margin. So the interval covers with at least the confidence asked, a flat
profile gets a lower bound above 0 in at most (1 - confidence) / 2 of runs, and a verdict that needs the lower bound
to clear a minimum effect calls a true amplitude of exactly that size in at most as many.

Each difference may have several variance estimates (the Bernoulli variance of the outcomes, the scatter of
whole units); it takes the largest, and when the one with fewer degrees of freedom is the larger on average, its
degrees of freedom widen both margins (t and studentized range on df instead of the normal's).
"""

from __future__ import annotations

import functools

import numpy as np
from scipy import stats as scipy_stats


def ordered_pairs(n_phases: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) index arrays of every ordered pair of distinct phases."""
    return np.nonzero(~np.eye(n_phases, dtype=bool))


@functools.cache
def range_margin(n_phases: int, df: float, level: float) -> float:
    """The ``level`` quantile of the studentized range of ``n_phases`` means, over sqrt 2: the largest
    standardized error of a difference of two phases that all pairs stay under with probability ``level``."""
    if n_phases < 2:
        return 0.0
    return float(scipy_stats.studentized_range.ppf(level, n_phases, df) / np.sqrt(2))


def simultaneous_amplitude_bounds(
    profile: np.ndarray, variances: list[tuple[np.ndarray, float]], confidence: float = 0.95
) -> tuple[np.ndarray, np.ndarray]:
    """(lower [B], upper [B]) of the amplitude, in [0, 1], of profiles [B, P] (proportions; NaN marks a phase no
    prompt reaches, left out) whose differences of ordered pairs of phases (`ordered_pairs`) have the variance
    estimates ``variances``: a list of ([B, pairs], degrees of freedom)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    profile = np.atleast_2d(profile)
    n_phases = profile.shape[1]
    a, b = ordered_pairs(n_phases)
    difference = profile[:, a] - profile[:, b]  # [B, pairs]
    variance = np.stack([np.broadcast_to(v, difference.shape) for v, _ in variances])  # [sets, B, pairs]
    dfs = np.array([df for _, df in variances])
    with np.errstate(invalid="ignore"):
        largest = np.argmax(np.nanmean(np.where(np.isfinite(difference), variance, np.nan), axis=2), axis=0)  # [B]
    # the widest margins of the sets whose average variance is the largest: a tie keeps the fewer df
    df = dfs[largest]
    se = np.sqrt(np.maximum(variance.max(axis=0), 0.0))
    reached = np.isfinite(profile).sum(axis=1)
    tail = (1 - confidence) / 2
    margin = np.array([range_margin(int(n), float(d), 1 - tail) for n, d in zip(reached, df, strict=True)])
    single = scipy_stats.t.ppf(1 - tail, df)
    with np.errstate(invalid="ignore"):
        lower = np.nanmax(np.where(np.isfinite(difference), difference - margin[:, None] * se, -np.inf), axis=1)
        upper = np.nanmax(np.where(np.isfinite(difference), difference + single[:, None] * se, -np.inf), axis=1)
    return np.clip(lower, 0.0, 1.0), np.clip(upper, 0.0, 1.0)
