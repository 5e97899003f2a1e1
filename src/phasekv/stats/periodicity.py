"""Does the accuracy pattern repeat with the stride S? Period difference and fold by S."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._checks import check_stride, whole_or_float


def period_difference(accuracy, stride: int) -> np.ndarray:
    """Mean of |A(r) - A(r+S)| over the residues r with r + S < M, in percentage points.

    ``accuracy``: shape [..., M], proportions; returns shape [...]. Only pairs inside the
    measured residues are used (no wrap-around), so with M = 8 and S = 4 it averages
    r = 0..3, as in the paper; requires 1 <= S < M. A small value next to the gap means the
    pattern repeats with period S.
    """
    acc = np.asarray(accuracy, dtype=float)
    if acc.ndim == 0:
        raise ValueError("accuracy needs a residue axis")
    s = check_stride(stride, acc.shape[-1])
    return 100.0 * np.abs(acc[..., :-s] - acc[..., s:]).mean(axis=-1)


@dataclass(frozen=True)
class Fold:
    """Accuracy per phase p = r mod S, pooling the residues that share a phase.

    Arrays have shape [S]: ``n_residues`` (how many residues fold onto each phase; unequal when
    S does not divide M), pooled ``successes`` and ``counts`` (integers when the inputs are
    whole numbers, floats otherwise, e.g. sums of fractional cells), and ``accuracy`` =
    successes / counts as a proportion.
    """

    stride: int
    n_residues: np.ndarray
    successes: np.ndarray
    counts: np.ndarray
    accuracy: np.ndarray


def fold_by_stride(successes, counts, stride: int) -> Fold:
    """Pool per-residue ``successes`` and ``counts`` (shape [M] each) by phase r mod S."""
    succ = np.asarray(successes)
    cnt = np.asarray(counts)
    if succ.ndim != 1 or succ.shape != cnt.shape:
        raise ValueError(
            f"successes and counts must be 1-dimensional of equal length, got {succ.shape} and {cnt.shape}"
        )
    modulus = succ.shape[0]
    s = check_stride(stride, modulus)
    phase = np.arange(modulus) % s
    pooled_counts = np.bincount(phase, weights=cnt, minlength=s)
    if np.any(pooled_counts <= 0):
        raise ValueError("every phase needs at least one prompt to fold")
    pooled_successes = np.bincount(phase, weights=succ, minlength=s)
    return Fold(
        stride=s,
        n_residues=np.bincount(phase, minlength=s),
        successes=np.asarray(whole_or_float(pooled_successes)),
        counts=np.asarray(whole_or_float(pooled_counts)),
        accuracy=pooled_successes / pooled_counts,
    )
