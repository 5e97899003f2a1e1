"""Input checks shared by the statistics modules (private)."""

from __future__ import annotations

import numpy as np


def _unit_floats(data, ndim: int, name: str, accepts: str, holds: str, fits) -> np.ndarray:
    """``data`` as a float array with ``ndim`` dimensions, booleans as 0/1, every number passing ``fits``.

    ``accepts`` and ``holds`` complete the error messages for a non-number dtype and a failing value.
    """
    arr = np.asarray(data)
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty")
    if arr.dtype == bool:
        return arr.astype(float)
    if not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"{name} must be {accepts}, got dtype {arr.dtype}")
    values = arr.astype(float)
    bad = ~fits(values)
    if bad.any():
        first = values[bad].flat[0]
        raise ValueError(f"{name} must hold {holds}; found {first!r}")
    return values


def as_correctness(correct, ndim: int, name: str = "correct") -> np.ndarray:
    """Return ``correct`` as a float array of 0s and 1s with exactly ``ndim`` dimensions.

    Accepts booleans or numbers that are all 0 or 1; raises ``ValueError`` on anything else
    (other values, NaN, wrong number of dimensions, no entries).
    """
    return _unit_floats(
        correct, ndim, name, "boolean or 0/1 numbers", "only 0/1 (or booleans)", lambda v: (v == 0.0) | (v == 1.0)
    )


def as_fractions(cells, ndim: int, name: str = "correct") -> np.ndarray:
    """Return ``cells`` as a float array of values in [0, 1] with exactly ``ndim`` dimensions.

    Accepts booleans, 0/1 or fractions (e.g. a cell's accuracy over several placements); raises
    ``ValueError`` on values outside [0, 1], NaN, non-numbers, wrong dimensions or no entries.
    """
    return _unit_floats(
        cells,
        ndim,
        name,
        "booleans or numbers in [0, 1]",
        "values in [0, 1] (0/1, booleans or fractions)",
        lambda v: (v >= 0.0) & (v <= 1.0),  # NaN fails both comparisons
    )


def whole_or_float(values) -> list:
    """Plain ints when every value is a whole number (within 1e-9), else floats (for JSON)."""
    arr = np.asarray(values, dtype=float).ravel()
    rounded = np.round(arr)
    if np.all(np.abs(arr - rounded) <= 1e-9):
        return [int(v) for v in rounded]
    return [float(v) for v in arr]


def check_stride(stride: int, modulus: int) -> int:
    """Return ``stride`` as an int after checking 1 <= stride < modulus."""
    if int(stride) != stride or not 1 <= stride < modulus:
        raise ValueError(f"stride must be an integer with 1 <= stride < modulus ({modulus}), got {stride!r}")
    return int(stride)


def check_confidence(confidence: float) -> float:
    """Return ``confidence`` after checking 0 < confidence < 1."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")
    return float(confidence)


def make_rng(seed: int | np.random.Generator) -> np.random.Generator:
    """A numpy Generator from an integer seed (or the Generator itself)."""
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)
