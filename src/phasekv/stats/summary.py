"""One JSON-ready record of residue-grouped accuracy, built for either evaluation design.

Two designs:
- independent prompts (``summarize_prompts``): Wilson intervals and a chi-square test;
- mappings x residues (``summarize_mappings``): each key-name mapping evaluated at every
  residue (a cell is 0/1, or the mapping's accuracy over several placements), so mappings are
  resampled (bootstrap) and residue labels are permuted within mappings (permutation test).
Accuracies (``accuracy``, ``ci_low``, ``ci_high``, ``mean``, ``worst``, ``best``) are
proportions in [0, 1]; fields ending in ``_points`` are percentage points.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from ._checks import as_fractions, check_confidence, check_stride, whole_or_float
from .bootstrap import BASIC, bootstrap_mappings
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
    ``gap_points`` and ``period_difference_points`` to [low, high], and
    ``stat_interval_methods`` names each one's bootstrap method (``percentile`` or ``basic``).
    ``counts`` and ``successes`` are integers, except for fractional mapping cells without
    ``trials_per_cell`` (then they are sums of cells, possibly fractional).
    ``trials_per_cell`` (mappings design): prompts behind each (mapping, residue) cell.
    """

    design: str
    modulus: int
    stride: int | None
    counts: list[int] | list[float]
    successes: list[int] | list[float]
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
    stat_interval_methods: dict[str, str] | None = None
    trials_per_cell: int | None = None

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
        "counts": whole_or_float(counts),
        "successes": whole_or_float(successes),
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
            "counts": whole_or_float(fold.counts),
            "successes": whole_or_float(fold.successes),
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
    trials_per_cell: int | None = None,
    unit: str = "mapping",
) -> ResidueSummary:
    """Summary for ``correct`` of shape [n_mappings, M]: mapping i evaluated at every residue (``unit`` names
    the rows in the summary's labels: "mapping", "haystack").

    Cells are 0/1, or fractions in [0, 1] when a cell is the mean over several placements of one
    mapping in one residue group; per-residue accuracy is the mean of the cells over mappings.
    With ``trials_per_cell`` = P (every cell the mean of P prompts), ``counts`` are prompts
    (n_mappings x P) and ``successes`` correct prompts (cell x P must then be whole numbers);
    without it, counts are mappings and successes are sums of cells.

    Intervals: per residue and for the mean, percentile bootstrap over whole mappings (rows);
    for worst/best/gap/period difference, the basic bootstrap interval (see
    :func:`bootstrap_mappings`). Uniformity is the within-mapping permutation test. ``seed``
    seeds both, through two independent streams spawned from it.
    """
    check_confidence(confidence)
    values = as_fractions(correct, ndim=2)
    n, modulus = values.shape
    if stride is not None:
        stride = check_stride(stride, modulus)
    column_sums = values.sum(axis=0)
    if trials_per_cell is None:
        successes, counts = column_sums, np.full(modulus, n)
    else:
        if int(trials_per_cell) != trials_per_cell or trials_per_cell < 1:
            raise ValueError(f"trials_per_cell must be a positive integer, got {trials_per_cell!r}")
        trials_per_cell = int(trials_per_cell)
        scaled = values * trials_per_cell
        if np.any(np.abs(scaled - np.round(scaled)) > 1e-6):
            raise ValueError(f"cells must be multiples of 1/trials_per_cell = 1/{trials_per_cell}")
        successes, counts = np.round(scaled).sum(axis=0), np.full(modulus, n * trials_per_cell)
    boot_seq, perm_seq = np.random.SeedSequence(seed).spawn(2)
    boot = bootstrap_mappings(
        values, stride, n_resamples, np.random.default_rng(boot_seq), confidence, spread_method=BASIC
    )
    test = permutation_uniformity(values, n_permutations, np.random.default_rng(perm_seq))
    return ResidueSummary(
        design=MAPPINGS if unit == "mapping" else f"{unit}s x residues",
        ci_low=_floats(boot.accuracy_low),
        ci_high=_floats(boot.accuracy_high),
        ci_method=BOOTSTRAP.replace("mappings", f"{unit}s"),
        confidence=confidence,
        uniformity=dataclasses.replace(test, seed=int(seed)),
        n_mappings=int(n),
        bootstrap_resamples=boot.n_resamples,
        bootstrap_seed=int(seed),
        stat_intervals={name: [low, high] for name, (low, high) in boot.stats.items()},
        stat_interval_methods=dict(boot.stat_methods),
        trials_per_cell=trials_per_cell,
        **_common(successes, counts, column_sums / n, stride),
    )
