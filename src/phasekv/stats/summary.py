"""One JSON-ready record of residue-grouped accuracy, built for either evaluation design.

Two designs:
- independent prompts (``summarize_prompts``): Wilson intervals and a chi-square test;
- mappings x residues (``summarize_mappings``): each key-name mapping evaluated at every
  residue, so mappings are resampled (bootstrap) and residue labels are permuted within
  mappings (permutation test).
Accuracies (``accuracy``, ``ci_low``, ``ci_high``, ``mean``, ``worst``, ``best``) are
proportions in [0, 1]; fields ending in ``_points`` are percentage points.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ._checks import as_correctness, check_confidence, check_stride
from .bootstrap import bootstrap_mappings
from .periodicity import fold_by_stride, period_difference
from .residues import residue_accuracy
from .spread import spread_stats
from .uniformity import UniformityTest, chi_square_uniformity, permutation_uniformity

PROMPTS = "independent prompts"
MAPPINGS = "mappings x residues"
WILSON = "wilson"
BOOTSTRAP = "bootstrap percentile over mappings"


@dataclass(frozen=True)
class ResidueSummary:
    """Residue-grouped accuracy with intervals, spread, periodicity and a uniformity test.

    Per-residue lists have length M. ``fold`` (when a stride is given) holds lists of length S
    under ``phase``, ``n_residues``, ``counts``, ``successes``, ``accuracy``.
    ``stat_intervals`` (bootstrap design only) maps ``mean``, ``worst``, ``best``,
    ``gap_points`` and ``period_difference_points`` to [low, high].
    """

    design: str
    modulus: int
    stride: int | None
    counts: list[int]
    successes: list[int]
    accuracy: list[float]
    ci_low: list[float]
    ci_high: list[float]
    ci_method: str
    confidence: float
    mean: float
    worst: float
    best: float
    worst_residue: int
    best_residue: int
    gap_points: float
    period_difference_points: float | None
    fold: dict[str, list] | None
    uniformity: UniformityTest
    n_mappings: int | None = None
    bootstrap_resamples: int | None = None
    bootstrap_seed: int | None = None
    stat_intervals: dict[str, list[float]] | None = None

    def to_dict(self) -> dict:
        """A JSON-serialisable dict (plain ints, floats, strings, lists, dicts and None)."""
        return dataclasses.asdict(self)


def _floats(values) -> list[float]:
    return [float(v) for v in np.asarray(values).ravel()]


def _ints(values) -> list[int]:
    return [int(v) for v in np.asarray(values).ravel()]


def _common(successes, counts, accuracy, stride):
    """Spread, period difference and fold shared by both designs."""
    spread = spread_stats(accuracy)
    fields = {
        "modulus": int(len(accuracy)),
        "stride": stride,
        "counts": _ints(counts),
        "successes": _ints(successes),
        "accuracy": _floats(accuracy),
        "mean": float(spread["mean"]),
        "worst": float(spread["worst"]),
        "best": float(spread["best"]),
        "worst_residue": int(np.argmin(accuracy)),
        "best_residue": int(np.argmax(accuracy)),
        "gap_points": float(spread["gap_points"]),
        "period_difference_points": None,
        "fold": None,
    }
    if stride is not None:
        fold = fold_by_stride(successes, counts, stride)
        fields["period_difference_points"] = float(period_difference(accuracy, stride))
        fields["fold"] = {
            "phase": list(range(fold.stride)),
            "n_residues": _ints(fold.n_residues),
            "counts": _ints(fold.counts),
            "successes": _ints(fold.successes),
            "accuracy": _floats(fold.accuracy),
        }
    return fields


def summarize_prompts(
    correct, residues, modulus: int, stride: int | None = None, confidence: float = 0.95
) -> ResidueSummary:
    """Summary for independent prompts: ``correct`` [N] (0/1), ``residues`` [N] in [0, M).

    Intervals are Wilson; uniformity is the chi-square test of homogeneity. Needs M >= 2 and
    a stride (if given) with 1 <= S < M.
    """
    check_confidence(confidence)
    if stride is not None:
        stride = check_stride(stride, modulus)
    groups = residue_accuracy(correct, residues, modulus, confidence)
    return ResidueSummary(
        design=PROMPTS,
        ci_low=_floats(groups.ci_low),
        ci_high=_floats(groups.ci_high),
        ci_method=WILSON,
        confidence=confidence,
        uniformity=chi_square_uniformity(groups.successes, groups.counts),
        **_common(groups.successes, groups.counts, groups.accuracy, stride),
    )


def summarize_mappings(
    correct,
    stride: int | None = None,
    n_resamples: int = 2000,
    n_permutations: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> ResidueSummary:
    """Summary for ``correct`` of shape [n_mappings, M]: mapping i evaluated at every residue.

    Intervals (per residue and for mean/worst/best/gap/period difference) are percentile
    bootstrap over mappings; uniformity is the within-mapping permutation test. ``seed`` seeds
    both, through two independent streams spawned from it.
    """
    check_confidence(confidence)
    values = as_correctness(correct, ndim=2)
    n, modulus = values.shape
    if stride is not None:
        stride = check_stride(stride, modulus)
    boot_seq, perm_seq = np.random.SeedSequence(seed).spawn(2)
    boot = bootstrap_mappings(values, stride, n_resamples, np.random.default_rng(boot_seq), confidence)
    test = permutation_uniformity(values, n_permutations, np.random.default_rng(perm_seq))
    successes = values.sum(axis=0)
    counts = np.full(modulus, n)
    return ResidueSummary(
        design=MAPPINGS,
        ci_low=_floats(boot.accuracy_low),
        ci_high=_floats(boot.accuracy_high),
        ci_method=BOOTSTRAP,
        confidence=confidence,
        uniformity=dataclasses.replace(test, seed=int(seed)),
        n_mappings=int(n),
        bootstrap_resamples=boot.n_resamples,
        bootstrap_seed=int(seed),
        stat_intervals={name: [low, high] for name, (low, high) in boot.stats.items()},
        **_common(successes, counts, successes / n, stride),
    )
