"""Residue-grouped accuracy statistics: Wilson and bootstrap intervals, spread, periodicity,
uniformity tests, the phase verdict robust to smooth position effects with its effect size and the
design's minimum detectable effect, a JSON-ready summary and its printed table, which stride the period check
uses (`stride`) (numpy/scipy only)."""

from .bootstrap import BootstrapIntervals, bootstrap_mappings, resample_accuracy
from .format import format_summary, format_verdict, verdict_cell
from .intervals import wilson_interval
from .periodicity import Fold, fold_by_stride, period_difference
from .phase_test import PhaseDesign, PhaseTest, phase_test, placebo_periods
from .power import detection_rate, minimum_detectable_effect
from .residues import ResidueAccuracy, residue_accuracy
from .spread import spread_stats
from .summary import ResidueSummary, summarize_mappings, summarize_prompts
from .uniformity import UniformityTest, chi_square_uniformity, permutation_uniformity
from .verdict import (
    AT_CHANCE,
    INCONCLUSIVE,
    MAX_MDE_POINTS,
    NO_EFFECT,
    NOT_TESTABLE,
    PHASE_SENSITIVE,
    PhaseVerdict,
    PositionTrend,
    below_min_effect,
    inconclusive,
    phase_verdict,
    position_trend,
    unresolved_size,
)

__all__ = [
    "AT_CHANCE",
    "INCONCLUSIVE",
    "MAX_MDE_POINTS",
    "NO_EFFECT",
    "NOT_TESTABLE",
    "PHASE_SENSITIVE",
    "below_min_effect",
    "inconclusive",
    "unresolved_size",
    "detection_rate",
    "minimum_detectable_effect",
    "BootstrapIntervals",
    "Fold",
    "PhaseDesign",
    "PhaseTest",
    "PhaseVerdict",
    "PositionTrend",
    "ResidueAccuracy",
    "ResidueSummary",
    "UniformityTest",
    "bootstrap_mappings",
    "chi_square_uniformity",
    "fold_by_stride",
    "format_summary",
    "format_verdict",
    "period_difference",
    "phase_test",
    "phase_verdict",
    "placebo_periods",
    "position_trend",
    "permutation_uniformity",
    "resample_accuracy",
    "residue_accuracy",
    "spread_stats",
    "summarize_mappings",
    "summarize_prompts",
    "verdict_cell",
    "wilson_interval",
]
