"""Statistics over training seeds: a design's seeds are its units (each seed one trained model).

`seed_summary` gives the mean with a 95% t interval over seeds; `compare_seeds` tests whether one
design's seeds exceed (or fall below) another's by an exact permutation test of the difference in
means over seed labels (every split of the pooled seeds: C(n_a + n_b, n_a) of them), with Welch's t
test beside it, Welch's 95% interval of the difference, and Hedges' g as the effect size.

With 4 seeds per design the exact permutation test cannot go below 1/C(8, 4) = 1/70 = 0.014
(one-sided): a clean separation of the seeds is the most it can show.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

ALTERNATIVES = ("greater", "less")


def seed_summary(values: Sequence[float], confidence: float = 0.95) -> dict:
    """{n, mean, sd, ci}: ci is the t interval of the mean over seeds (None with one seed)."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("no seeds to summarise")
    mean = float(x.mean())
    if x.size < 2:
        return {"n": 1, "mean": mean, "sd": None, "ci": None}
    sd = float(x.std(ddof=1))
    half = float(stats.t.ppf(0.5 + confidence / 2, x.size - 1)) * sd / math.sqrt(x.size)
    return {"n": int(x.size), "mean": mean, "sd": sd, "ci": [mean - half, mean + half]}


def hedges_g(a: np.ndarray, b: np.ndarray) -> float | None:
    """(mean a - mean b) / pooled sd, small-sample corrected; None when the pooled sd is 0."""
    na, nb = a.size, b.size
    pooled = math.sqrt(((na - 1) * a.var(ddof=1) + (nb - 1) * b.var(ddof=1)) / (na + nb - 2))
    if pooled == 0:
        return None
    correction = 1 - 3 / (4 * (na + nb) - 9)
    return float(correction * (a.mean() - b.mean()) / pooled)


def welch_interval(a: np.ndarray, b: np.ndarray, confidence: float = 0.95) -> list[float] | None:
    """Welch's interval of mean a - mean b (None when both groups have no spread)."""
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    if va + vb == 0:
        return None
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    half = float(stats.t.ppf(0.5 + confidence / 2, df)) * math.sqrt(va + vb)
    diff = float(a.mean() - b.mean())
    return [diff - half, diff + half]


def compare_seeds(a: Sequence[float], b: Sequence[float], alternative: str = "greater") -> dict:
    """Is mean(a) > mean(b) ("greater") or < ("less") over seeds? Needs >= 2 seeds in each group."""
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}, got {alternative!r}")
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.size < 2 or y.size < 2:
        raise ValueError(f"a test across seeds needs >= 2 seeds per design, got {x.size} and {y.size}")
    permutation = stats.permutation_test(
        (x, y),
        lambda u, v, axis: np.mean(u, axis=axis) - np.mean(v, axis=axis),
        permutation_type="independent",
        alternative=alternative,
        n_resamples=np.inf,  # exact: every split of the pooled seeds
        vectorized=True,
    )
    spread = x.var(ddof=1) + y.var(ddof=1) > 0  # Welch's t is undefined when neither group varies
    welch_p = float(stats.ttest_ind(x, y, equal_var=False, alternative=alternative).pvalue) if spread else None
    return {
        "alternative": alternative,
        "n": [int(x.size), int(y.size)],
        "difference": float(x.mean() - y.mean()),
        "difference_ci": welch_interval(x, y),
        "permutation_p": float(permutation.pvalue),
        "permutation_splits": math.comb(x.size + y.size, x.size),
        "welch_p": welch_p,
        "hedges_g": hedges_g(x, y),
    }
