"""Tests of the null hypothesis that accuracy is the same at every residue."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import chi2_contingency

from ._checks import as_fractions, make_rng

CHI_SQUARE = "chi-square homogeneity"
PERMUTATION = "permutation within mappings"
_CHUNK_ELEMENTS = 1 << 22  # permuted entries held in memory at once


@dataclass(frozen=True)
class UniformityTest:
    """Result of a uniformity test across residues.

    ``statistic`` is Pearson's chi-square of the M x 2 (correct, wrong) table in both tests;
    ``df`` is M - 1 for the chi-square test and None for the permutation test, which instead
    records ``n_permutations`` and ``seed``. ``note`` explains degenerate or approximate cases
    (empty string otherwise).
    """

    method: str
    statistic: float
    p_value: float
    df: int | None = None
    n_permutations: int | None = None
    seed: int | None = None
    note: str = ""


def _pearson_columns(col_successes: np.ndarray, per_column: float) -> np.ndarray:
    """Chi-square of the table [col_successes, per_column - col_successes] over the last axis.

    ``col_successes``: shape [..., M]; every column has ``per_column`` trials. Equals
    sum_r (c_r - mean c)^2 (1/mean c + 1/(per_column - mean c)); 0 when all or none correct.
    """
    mean = col_successes.mean(axis=-1, keepdims=True)
    ss = ((col_successes - mean) ** 2).sum(axis=-1)
    mean = mean[..., 0]
    degenerate = (mean <= 0) | (mean >= per_column)
    scale = np.where(degenerate, 0.0, 1.0 / np.where(degenerate, 1.0, mean * (per_column - mean)))
    return ss * per_column * scale


def _degenerate_note(total: float, trials: float) -> str:
    if total == 0:
        return "every prompt wrong: no variation to test, p = 1"
    if total == trials:
        return "every prompt correct: no variation to test, p = 1"
    return ""


def chi_square_uniformity(successes, counts) -> UniformityTest:
    """Chi-square test of homogeneity on the M x 2 table (correct, wrong) per residue.

    ``successes``, ``counts``: shape [M], M >= 2, every count >= 1. Assumes independent prompts
    (use :func:`permutation_uniformity` when mappings repeat across residues). No Yates
    correction, also for M = 2. All-correct or all-wrong data return statistic 0 and p = 1 with
    a note; expected cell counts below 5 are flagged in the note.
    """
    succ = np.asarray(successes, dtype=float)
    cnt = np.asarray(counts, dtype=float)
    if succ.ndim != 1 or succ.shape != cnt.shape:
        raise ValueError(
            f"successes and counts must be 1-dimensional of equal length, got {succ.shape} and {cnt.shape}"
        )
    if succ.shape[0] < 2:
        raise ValueError("a uniformity test needs at least 2 residues")
    empty = np.flatnonzero(cnt < 1)
    if empty.size:
        raise ValueError(f"residue groups with no prompts: {empty.tolist()}")
    if np.any((succ < 0) | (succ > cnt)):
        raise ValueError("successes must satisfy 0 <= successes <= counts")
    df = succ.shape[0] - 1
    note = _degenerate_note(succ.sum(), cnt.sum())
    if note:
        return UniformityTest(CHI_SQUARE, 0.0, 1.0, df=df, note=note)
    table = np.stack([succ, cnt - succ], axis=1)
    result = chi2_contingency(table, correction=False)
    if np.min(result.expected_freq) < 5:
        note = "some expected cell counts are below 5: the chi-square p-value is approximate"
    return UniformityTest(CHI_SQUARE, float(result.statistic), float(result.pvalue), df=df, note=note)


def permutation_uniformity(correct, n_permutations: int = 2000, seed: int | np.random.Generator = 0) -> UniformityTest:
    """Permutation test of uniformity that respects the mapping structure.

    ``correct``: shape [n_mappings, M], M >= 2 (each mapping evaluated at every residue); cells
    are 0/1 or fractions in [0, 1] (a cell's accuracy over several placements). Under the null,
    each mapping's outcomes are exchangeable across residues, so residue labels are shuffled
    independently within every mapping (rows whose cells are all equal are unchanged by this and
    are skipped). Statistic: Pearson chi-square of the column totals (with fractional cells it is
    the same formula on fractional totals, used only through the permutation distribution);
    p = (1 + #{permuted >= observed}) / (1 + n_permutations).
    """
    values = as_fractions(correct, ndim=2)
    n, modulus = values.shape
    if modulus < 2:
        raise ValueError("a uniformity test needs at least 2 residues")
    if int(n_permutations) != n_permutations or n_permutations < 1:
        raise ValueError(f"n_permutations must be a positive integer, got {n_permutations!r}")
    n_permutations = int(n_permutations)
    recorded_seed = None if isinstance(seed, np.random.Generator) else int(seed)
    observed = float(_pearson_columns(values.sum(axis=0), n))
    note = _degenerate_note(values.sum(), values.size)
    varying = values[values.max(axis=1) > values.min(axis=1)]
    if not note and varying.shape[0] == 0:
        note = "every mapping has the same accuracy at every residue: no variation within mappings, p = 1"
    if note:
        return UniformityTest(PERMUTATION, observed, 1.0, n_permutations=n_permutations, seed=recorded_seed, note=note)
    fixed = values.sum(axis=0) - varying.sum(axis=0)
    rng = make_rng(seed)
    chunk = max(1, _CHUNK_ELEMENTS // varying.size)
    tolerance = 1e-9 * max(1.0, observed)
    exceed = 0
    for start in range(0, n_permutations, chunk):
        b = min(chunk, n_permutations - start)
        shuffled = np.repeat(varying[None], b, axis=0)
        rng.permuted(shuffled, axis=2, out=shuffled)
        stats = _pearson_columns(shuffled.sum(axis=1) + fixed, n)
        exceed += int(np.count_nonzero(stats >= observed - tolerance))
    p_value = (1 + exceed) / (1 + n_permutations)
    return UniformityTest(PERMUTATION, observed, p_value, n_permutations=n_permutations, seed=recorded_seed)
