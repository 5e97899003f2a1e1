"""Bootstrap over key-name mappings when every mapping is evaluated at every residue."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._checks import as_correctness, check_confidence, check_stride, make_rng
from .periodicity import period_difference
from .spread import spread_stats

_CHUNK_ELEMENTS = 1 << 21  # resampling weights held in memory at once


@dataclass(frozen=True)
class BootstrapIntervals:
    """Percentile intervals from resampling mappings with replacement.

    ``accuracy_low`` / ``accuracy_high``: shape [M], proportions. ``stats`` maps ``mean``,
    ``worst``, ``best`` (proportions), ``gap_points`` and, when a stride was given,
    ``period_difference_points`` (percentage points) to ``(low, high)``. ``seed`` is None when
    a Generator was passed instead of an integer.
    """

    n_resamples: int
    seed: int | None
    confidence: float
    accuracy_low: np.ndarray
    accuracy_high: np.ndarray
    stats: dict[str, tuple[float, float]]


def resample_accuracy(correct, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Per-residue accuracy of ``n_resamples`` bootstrap resamples of the mappings.

    ``correct``: shape [n_mappings, M], 0/1. Each resample draws n_mappings rows with
    replacement; it is computed as (multiplicity counts [chunk, n]) @ correct / n, in chunks.
    Returns shape [n_resamples, M].
    """
    values = as_correctness(correct, ndim=2)
    n = values.shape[0]
    chunk = max(1, _CHUNK_ELEMENTS // n)
    out = np.empty((n_resamples, values.shape[1]))
    for start in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - start)
        rows = rng.integers(0, n, size=(b, n)) + (np.arange(b) * n)[:, None]
        weights = np.bincount(rows.ravel(), minlength=b * n).reshape(b, n)
        out[start : start + b] = weights @ values / n
    return out


def bootstrap_mappings(
    correct,
    stride: int | None = None,
    n_resamples: int = 2000,
    seed: int | np.random.Generator = 0,
    confidence: float = 0.95,
) -> BootstrapIntervals:
    """Percentile bootstrap intervals for per-residue accuracy and the summary statistics.

    ``correct``: shape [n_mappings, M] (row i = mapping i evaluated at residues 0..M-1), 0/1.
    Mappings, not prompts, are the resampled unit, because a mapping's difficulty is shared by
    all its residues. Needs at least 2 mappings. The worst/best/gap/period intervals inherit
    the bias of min, max and |.| over noisy groups (a resampled gap is larger than the observed
    one on average), so they can sit above the estimate and under-cover when residues are
    near-tied: in a simulation with 7 of 8 residues tied at the top, the 95% gap interval
    covered the true gap about 55% of the time. Read them as descriptive.
    """
    check_confidence(confidence)
    values = as_correctness(correct, ndim=2)
    if values.shape[0] < 2:
        raise ValueError(f"the bootstrap needs at least 2 mappings, got {values.shape[0]}")
    if int(n_resamples) != n_resamples or n_resamples < 1:
        raise ValueError(f"n_resamples must be a positive integer, got {n_resamples!r}")
    if stride is not None:
        check_stride(stride, values.shape[1])
    acc = resample_accuracy(values, int(n_resamples), make_rng(seed))
    tail = (1.0 - confidence) / 2.0
    probs = [tail, 1.0 - tail]
    per_residue = np.quantile(acc, probs, axis=0)
    samples = spread_stats(acc)
    if stride is not None:
        samples["period_difference_points"] = period_difference(acc, stride)
    stats = {}
    for name, draws in samples.items():
        low, high = np.quantile(draws, probs)
        stats[name] = (float(low), float(high))
    return BootstrapIntervals(
        n_resamples=int(n_resamples),
        seed=None if isinstance(seed, np.random.Generator) else int(seed),
        confidence=confidence,
        accuracy_low=per_residue[0],
        accuracy_high=per_residue[1],
        stats=stats,
    )
