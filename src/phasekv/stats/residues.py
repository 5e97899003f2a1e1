"""Accuracy grouped by residue (position mod M) for independent prompts."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._checks import as_correctness
from .intervals import wilson_interval


@dataclass(frozen=True)
class ResidueAccuracy:
    """Per-residue counts, accuracy and Wilson bounds; every array has shape [M].

    ``accuracy``, ``ci_low`` and ``ci_high`` are proportions in [0, 1].
    """

    successes: np.ndarray
    counts: np.ndarray
    accuracy: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    confidence: float

    @property
    def modulus(self) -> int:
        return int(self.counts.shape[0])


def check_residues(residues, modulus: int, n: int) -> np.ndarray:
    """Return ``residues`` as an int array of shape [n] after checking every label is in [0, M)."""
    if int(modulus) != modulus or modulus < 1:
        raise ValueError(f"modulus must be a positive integer, got {modulus!r}")
    labels = np.asarray(residues)
    if labels.ndim != 1:
        raise ValueError(f"residues must be 1-dimensional, got shape {labels.shape}")
    if labels.shape[0] != n:
        raise ValueError(f"correct has {n} prompts but residues has {labels.shape[0]} labels")
    if not np.issubdtype(labels.dtype, np.integer):
        if not np.issubdtype(labels.dtype, np.number) or np.any(labels != np.round(labels)):
            raise ValueError(f"residues must be integers, got dtype {labels.dtype}")
    labels = labels.astype(np.int64)
    outside = (labels < 0) | (labels >= modulus)
    if outside.any():
        raise ValueError(
            f"residues must lie in [0, {modulus}); found {int(labels[outside][0])} "
            f"({int(outside.sum())} labels outside)"
        )
    return labels


def residue_accuracy(correct, residues, modulus: int, confidence: float = 0.95) -> ResidueAccuracy:
    """Group per-prompt correctness by residue label.

    ``correct``: shape [N], booleans or 0/1; ``residues``: shape [N], integers in [0, modulus).
    Every residue must have at least one prompt (``ValueError`` names the empty ones).
    Intervals are Wilson score intervals, which assume independent prompts.
    """
    values = as_correctness(correct, ndim=1)
    labels = check_residues(residues, modulus, values.shape[0])
    counts = np.bincount(labels, minlength=modulus)
    empty = np.flatnonzero(counts == 0)
    if empty.size:
        raise ValueError(f"residue groups with no prompts: {empty.tolist()} (modulus {modulus})")
    successes = np.bincount(labels, weights=values, minlength=modulus).round().astype(np.int64)
    low, high = wilson_interval(successes, counts, confidence)
    return ResidueAccuracy(
        successes=successes,
        counts=counts,
        accuracy=successes / counts,
        ci_low=low,
        ci_high=high,
        confidence=confidence,
    )
