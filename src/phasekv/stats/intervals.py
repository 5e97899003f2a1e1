"""Wilson score intervals for binomial proportions."""

from __future__ import annotations

import numpy as np
from scipy.stats import norm

from ._checks import check_confidence


def wilson_interval(successes, trials, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval for ``successes`` of ``trials`` (no continuity correction).

    ``successes`` and ``trials`` broadcast against each other (any shape, integer counts with
    0 <= successes <= trials and trials >= 1). Returns ``(low, high)`` float arrays of the
    broadcast shape, as proportions in [0, 1]. Agrees with
    ``scipy.stats.binomtest(k, n).proportion_ci(confidence, method="wilson")``.
    """
    check_confidence(confidence)
    k = np.asarray(successes)
    n = np.asarray(trials)
    for name, arr in (("successes", k), ("trials", n)):
        if not np.issubdtype(arr.dtype, np.number) or np.any(arr != np.round(arr)):
            raise ValueError(f"{name} must be whole numbers, got {arr!r}")
    k, n = np.broadcast_arrays(k.astype(float), n.astype(float))
    if np.any(n < 1):
        raise ValueError("trials must be >= 1 for every interval (an empty group has no interval)")
    if np.any((k < 0) | (k > n)):
        raise ValueError("successes must satisfy 0 <= successes <= trials")
    z = norm.ppf(0.5 + confidence / 2.0)
    z2 = z * z
    denom = n + z2
    center = (k + z2 / 2.0) / denom
    half = (z / denom) * np.sqrt(k * (n - k) / n + z2 / 4.0)
    low = np.where(k == 0, 0.0, np.clip(center - half, 0.0, 1.0))
    high = np.where(k == n, 1.0, np.clip(center + half, 0.0, 1.0))
    return low, high
