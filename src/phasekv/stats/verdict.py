"""The phase verdict of a probe run: one rule and one wording, wherever a verdict is shown.

Rule, in order:
1. "not testable" when the target positions span too few periods for the test (`phase_test.MIN_PERIODS`);
2. "not judged: at chance" when the mean accuracy's interval reaches the chance level (a model that has not
   learned the task is flat for the wrong reason, and a pattern of 1% against 3% is not a weak spot);
3. "phase-sensitive" when the phase test rejects at ``alpha`` **and** the lower end of the phase amplitude's
   interval (best minus worst phase, accuracy points) is at least ``min_effect``;
4. "phase effect below {min_effect} points" when the test rejects but the amplitude may be smaller (its note
   says when the amplitude's interval also reaches past the minimum effect: the size is then unresolved);
5. "no phase effect detected" otherwise, when the run's minimum detectable effect
   (`power.minimum_detectable_effect`) is at most ``max_mde`` points; a null from a design that could miss a
   larger weak phase (or a weak phase of any size, or whose power was not computed) is
   "inconclusive: could miss a weak phase of up to X points": a blind design never reads as a clean null.

Placebo periods (coprime to the stride) are tested beside it, so a reader can see whether a pattern is
specific to the stride; the smooth trend in target position is reported, not tested.

Where the compression grid can move and was moved (`grid_shift`), the verdict rests on that causal test
instead (`rest_on_grid_shift`): rules 3 to 5 read "the pattern moves with the grid (shuffle p < ``alpha``)"
for "the phase test rejects" and the grid-phase amplitude for the phase amplitude; the chance rule stays, and
the position design's own verdict is kept beside it. A pattern of the position design that stays put when the
grid moves is an effect of position, not of the grid; one that moves with the grid but does not repeat along the
grid coordinate t - o (`GridShiftTest.periodic`) "depends on the grid, not periodic": no weak phase either.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import numpy as np

from ._checks import check_confidence
from .grid_shift import GridShiftTest
from .phase_test import METHOD, PhaseDesign, PhaseTest, placebo_periods
from .power import minimum_detectable_effect

PHASE_SENSITIVE = "phase-sensitive"
NO_EFFECT = "no phase effect detected"
NOT_TESTABLE = "not testable"
AT_CHANCE = "not judged: at chance"
GRID_NOT_PERIODIC = "depends on the grid, not periodic"
MIN_EFFECT_POINTS = 5.0
MAX_MDE_POINTS = 20.0  # a null that could miss a weak phase larger than this is inconclusive
INCONCLUSIVE = "inconclusive"


def inconclusive(mde_points: float | None, computed: bool = True) -> str:
    """The wording of a null whose design could miss a weak phase of ``mde_points`` (None: of any size)."""
    if not computed:
        return f"{INCONCLUSIVE}: the design's power was not computed"
    if mde_points is None:
        return f"{INCONCLUSIVE}: could miss a weak phase of any size"
    return f"{INCONCLUSIVE}: could miss a weak phase of up to {mde_points:g} points"


def with_power(label: str, mde: dict | None, max_mde: float) -> str:
    """A "no phase effect detected" that its design's MDE does not back (above ``max_mde``, none, or not
    computed) becomes inconclusive; every other label stands."""
    if label != NO_EFFECT:
        return label
    if mde is None:
        return inconclusive(None, computed=False)
    if mde["points"] is None or mde["points"] > max_mde:
        return inconclusive(mde["points"])
    return label


def below_min_effect(min_effect: float) -> str:
    """The wording of a replicated pattern whose amplitude may be smaller than the minimum effect."""
    return f"phase effect below {min_effect:g} points"


def unresolved_size(amplitude_ci: list[float], min_effect: float) -> str:
    """What "below the minimum effect" leaves open when the amplitude's interval reaches past it."""
    low, high = amplitude_ci
    return (
        f"the amplitude's interval [{low:.1f}, {high:.1f}] reaches past {min_effect:g} points: the pattern replicates "
        f"but its size is not resolved (it may be below {min_effect:g} points or well above); a design with more "
        "distinct prompts narrows it"
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
    """The JSON-ready verdict: ``test`` at ``period`` (with the effect size), ``placebo`` tests, ``trend``.

    ``effect_points`` is the phase amplitude (best minus worst phase, accuracy points) and ``effect_ci`` its
    interval; ``mde`` the minimum detectable single-phase drop of the test the verdict rests on, when computed
    (`power`). ``basis`` says which test that is; with a ``grid_shift`` test it rests on that one, its p-value,
    amplitude and MDE are the verdict's, and ``position_design`` keeps what the position design alone says
    (verdict, p_value, effect_points, effect_ci, mde, note)."""

    period: int
    alpha: float
    min_effect_points: float
    chance: float | None
    verdict: str
    p_value: float
    effect_points: float
    effect_ci: list[float] | None
    test: PhaseTest
    placebo: list[PhaseTest]
    trend: PositionTrend
    mde: dict | None = None
    max_mde_points: float = MAX_MDE_POINTS
    method: str = METHOD
    rule: str = ""
    note: str = ""
    basis: str = ""
    grid_shift: GridShiftTest | None = None
    position_design: dict | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def judge(test: PhaseTest, alpha: float, min_effect: float, chance: float | None) -> str:
    """The verdict's wording for a test (see the module docstring)."""
    if not test.testable:
        return NOT_TESTABLE
    if chance is not None and test.mean_ci is not None and test.mean_ci[0] <= chance:
        return AT_CHANCE
    if test.p_value >= alpha:
        return NO_EFFECT
    if test.amplitude_ci is not None and test.amplitude_ci[0] >= min_effect:
        return PHASE_SENSITIVE
    return below_min_effect(min_effect)


def rule_text(
    alpha: float,
    min_effect: float,
    chance: float | None,
    grid_shift: bool = False,
    max_mde: float = MAX_MDE_POINTS,
    mean_ci: list[float] | None = None,
) -> str:
    chance_text = ""
    if chance is not None:
        interval = "" if mean_ci is None else " [{:.1f}, {:.1f}]".format(*(100 * v for v in mean_ci))
        chance_text = f"; not judged when the mean's interval{interval} reaches chance ({100 * chance:.1f}%)"
    power_text = f"; a null is inconclusive when the design could miss a weak phase of more than {max_mde:g} points"
    if grid_shift:
        return (
            f"phase-sensitive when the pattern moves with the grid (grid-shift p < {alpha:g}), repeats along the "
            f"grid coordinate (phase test p < {alpha:g}) and the grid-phase amplitude's lower bound is at least "
            f"{min_effect:g} points{chance_text}{power_text}"
        )
    return (
        f"phase-sensitive when the phase test rejects at {alpha:g} and the phase amplitude's lower bound is at "
        f"least {min_effect:g} points{chance_text}{power_text}"
    )


def rest_on_grid_shift(verdict: PhaseVerdict, shifted: GridShiftTest) -> PhaseVerdict:
    """The verdict of a run whose grid was moved: the grid-shift test and its grid-phase amplitude decide (see
    the module docstring); the position design's verdict, p-value and amplitude are kept in
    ``position_design``."""
    alpha, min_effect, chance = verdict.alpha, verdict.min_effect_points, verdict.chance
    mean_ci = verdict.test.mean_ci
    if chance is not None and mean_ci is not None and mean_ci[0] <= chance:
        label = AT_CHANCE
    elif not shifted.moves_with_grid:
        label = NO_EFFECT
    elif shifted.periodic is False:
        label = GRID_NOT_PERIODIC
    elif shifted.amplitude_ci is not None and shifted.amplitude_ci[0] >= min_effect:
        label = PHASE_SENSITIVE
    else:
        label = below_min_effect(min_effect)
    label = with_power(label, shifted.mde, verdict.max_mde_points)
    note = ""
    if (
        label == below_min_effect(min_effect)
        and shifted.amplitude_ci is not None
        and shifted.amplitude_ci[1] >= min_effect
    ):
        note = unresolved_size(shifted.amplitude_ci, min_effect)
    elif label == GRID_NOT_PERIODIC:
        note = (
            f"the pattern moves with the grid but does not repeat every {shifted.period} tokens of the grid "
            f"coordinate (phase test along t - offset: p = {shifted.periodic_p_value:.3g}): a grid effect that is "
            "no weak phase, such as a cliff at one grid position or a partial first window"
        )
    elif not shifted.moves_with_grid and verdict.verdict in (PHASE_SENSITIVE, below_min_effect(min_effect)):
        note = (
            f"the position design's pattern ({verdict.verdict}) stays put when the grid moves: an effect of "
            "position, not of the grid"
        )
    moves = "moves" if shifted.moves_with_grid else "does not move"
    position_design = {
        "period": verdict.period,
        "verdict": verdict.verdict,
        "p_value": verdict.p_value,
        "effect_points": verdict.effect_points,
        "effect_ci": verdict.effect_ci,
        "mde": verdict.mde,
        "note": verdict.note,
    }
    return replace(
        verdict,
        period=shifted.period,
        verdict=label,
        p_value=shifted.p_value,
        effect_points=shifted.amplitude_points,
        effect_ci=shifted.amplitude_ci,
        mde=shifted.mde,
        rule=rule_text(alpha, min_effect, chance, grid_shift=True, max_mde=verdict.max_mde_points, mean_ci=mean_ci),
        note=note,
        basis=f"grid shift (the pattern {moves} with the grid, p = {shifted.p_value:.3g}); position design beside it",
        grid_shift=shifted,
        position_design=position_design,
    )


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
    units,
    positions,
    outcomes,
    stride: int,
    alpha: float = 0.05,
    seed: int = 0,
    n_resamples: int = 2000,
    *,
    prompt_ids=None,
    min_effect: float = MIN_EFFECT_POINTS,
    chance: float | None = None,
    mde: bool = False,
    max_mde: float = MAX_MDE_POINTS,
) -> PhaseVerdict:
    """The verdict on a phase effect at `stride` (see the module docstring).

    ``prompt_ids`` marks identical prompts (they count once); ``chance`` is the accuracy of guessing (e.g.
    1 / records), None for no chance rule; ``mde`` also simulates the run's minimum detectable effect, without
    which a null is inconclusive; ``max_mde`` is the largest MDE (points) that backs a null."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if stride < 2:
        raise ValueError(f"the phase test needs a stride >= 2, got {stride}")
    if not 0 <= min_effect <= 100:
        raise ValueError(f"min_effect is in accuracy points: it must be in [0, 100], got {min_effect}")
    if chance is not None and not 0 <= chance < 1:
        raise ValueError(f"chance is an accuracy in [0, 1), got {chance}")
    if not 0 < max_mde <= 100:
        raise ValueError(f"max_mde is in accuracy points: it must be in (0, 100], got {max_mde}")
    design = PhaseDesign(units, positions, stride, prompt_ids)
    test = design.test(outcomes, seed, n_resamples)
    placebo = [PhaseDesign(units, positions, p, prompt_ids).test(outcomes, seed, 0) for p in placebo_periods(stride)]
    verdict = judge(test, alpha, min_effect, chance)
    note = test.note
    rejected = [p.period for p in placebo if p.testable and p.p_value < alpha]
    if rejected and verdict == PHASE_SENSITIVE:
        note = (
            f"placebo period(s) {rejected} also reject at {alpha}: the position effect may not be specific "
            f"to the stride {stride}; read the trend and the accuracy-by-position plot"
        )
    if verdict == below_min_effect(min_effect) and test.amplitude_ci is not None and test.amplitude_ci[1] >= min_effect:
        note = unresolved_size(test.amplitude_ci, min_effect)
    detectable = None
    if mde and test.testable:
        detectable = minimum_detectable_effect(
            design, design.power_base(outcomes), alpha, min_effect, seed=seed, chance=chance
        )
    if test.testable:
        verdict = with_power(verdict, detectable, max_mde)
    return PhaseVerdict(
        period=int(stride),
        alpha=float(alpha),
        min_effect_points=float(min_effect),
        chance=None if chance is None else float(chance),
        verdict=verdict,
        p_value=test.p_value,
        effect_points=test.amplitude_points,
        effect_ci=test.amplitude_ci,
        test=test,
        placebo=placebo,
        trend=position_trend(units, positions, outcomes, n_resamples, seed),
        mde=detectable,
        max_mde_points=float(max_mde),
        rule=rule_text(alpha, min_effect, chance, max_mde=max_mde, mean_ci=test.mean_ci),
        note=note,
    )
