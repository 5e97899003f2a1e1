"""The phase verdict of a probe run: the replication test at the stride, placebo periods beside
it, and the smooth trend in target position that the test is robust to (reported, not tested).

The verdict reads "phase-sensitive" only when the replication test at the stride rejects at
``alpha``; placebo periods (coprime to the stride) are reported so a reader can see whether the
pattern is specific to the stride, and a note says so when a placebo rejects too. A design too
narrow to test gives "not testable", never a verdict either way.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ._checks import check_confidence
from .phase_test import PhaseDesign, PhaseTest, placebo_periods

PHASE_SENSITIVE = "phase-sensitive"
NO_EFFECT = "no phase effect detected"
NOT_TESTABLE = "not testable"
METHOD = (
    "replication across periods: per window of consecutive positions, unit means and a straight line "
    "removed, phase profiles compared between windows, sign-flip null over windows (phasekv.stats.phase_test)"
)


@dataclass(frozen=True)
class PositionTrend:
    """Least-squares slope of correctness on target position within units, in percentage points
    per 100 tokens, with a percentile bootstrap interval over units; and the range of positions."""

    slope_points_per_100_tokens: float
    ci: list[float]
    confidence: float
    n_resamples: int
    first_position: int
    last_position: int


@dataclass(frozen=True)
class PhaseVerdict:
    """The JSON-ready verdict: ``test`` at ``period``, ``placebo`` tests, ``trend``."""

    period: int
    alpha: float
    verdict: str
    p_value: float
    test: PhaseTest
    placebo: list[PhaseTest]
    trend: PositionTrend
    method: str = METHOD
    note: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def position_trend(
    units, positions, outcomes, n_resamples: int = 2000, seed: int = 0, confidence: float = 0.95
) -> PositionTrend:
    """Within-unit slope of outcome on position (units as bootstrap blocks)."""
    check_confidence(confidence)
    units, t, y = np.asarray(units), np.asarray(positions, dtype=float), np.asarray(outcomes, dtype=float)
    _, index = np.unique(units, return_inverse=True)
    sizes = np.bincount(index).astype(float)
    t_c = t - (np.bincount(index, t) / sizes)[index]
    y_c = y - (np.bincount(index, y) / sizes)[index]
    sxy, sxx = np.bincount(index, t_c * y_c), np.bincount(index, t_c * t_c)  # per unit
    slope = sxy.sum() / sxx.sum() if sxx.sum() > 0 else 0.0
    n_units = sizes.size
    draws = np.random.default_rng(seed).integers(0, n_units, size=(n_resamples, n_units))
    weights = np.stack([np.bincount(row, minlength=n_units) for row in draws])
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = (weights @ sxy) / (weights @ sxx)
    tail = (1 - confidence) / 2
    low, high = np.nanquantile(boot, [tail, 1 - tail]) if np.isfinite(boot).any() else (np.nan, np.nan)
    return PositionTrend(
        slope_points_per_100_tokens=float(1e4 * slope),
        ci=[float(1e4 * low), float(1e4 * high)],
        confidence=confidence,
        n_resamples=int(n_resamples),
        first_position=int(t.min()),
        last_position=int(t.max()),
    )


def phase_verdict(
    units, positions, outcomes, stride: int, alpha: float = 0.05, seed: int = 0, n_resamples: int = 2000
) -> PhaseVerdict:
    """Test for a phase effect at `stride` that a smooth position effect cannot fake; placebos beside it."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if stride < 2:
        raise ValueError(f"the phase test needs a stride >= 2, got {stride}")
    test = PhaseDesign(units, positions, stride).test(outcomes, seed)
    placebo = [PhaseDesign(units, positions, p).test(outcomes, seed) for p in placebo_periods(stride)]
    if not test.testable:
        verdict = NOT_TESTABLE
    else:
        verdict = PHASE_SENSITIVE if test.p_value < alpha else NO_EFFECT
    note = test.note
    rejected = [p.period for p in placebo if p.testable and p.p_value < alpha]
    if rejected:
        note = (
            f"placebo period(s) {rejected} also reject at {alpha}: the position effect is not specific "
            f"to the stride {stride}; read the trend and the accuracy-by-position plot"
        )
    return PhaseVerdict(
        period=int(stride),
        alpha=float(alpha),
        verdict=verdict,
        p_value=test.p_value,
        test=test,
        placebo=placebo,
        trend=position_trend(units, positions, outcomes, n_resamples, seed),
        note=note,
    )
