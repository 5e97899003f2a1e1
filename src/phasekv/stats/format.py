"""Plain-text, fixed-width table printed at the end of an evaluation."""

from __future__ import annotations

from .summary import ResidueSummary
from .verdict import below_min_effect


def _p(p_value: float) -> str:
    return f"{p_value:.2e}" if p_value < 1e-3 else f"{p_value:.4f}"


def _interval(low: float, high: float) -> str:
    return f"[{low:5.1f}, {high:5.1f}]"


def _count(value) -> str:
    return f"{value}" if isinstance(value, int) else f"{value:.2f}"


def _method(summary: ResidueSummary, name: str) -> str:
    methods = getattr(summary, "stat_interval_methods", None) or {}
    return f" ({methods[name]} bootstrap)" if name in methods else ""


def format_summary(summary: ResidueSummary, title: str | None = None) -> str:
    """Render per-residue accuracy with CI, then spread, gap, period and p-value lines.

    Accuracies are shown in percent, gap and period difference in percentage points. Interval
    lines name their bootstrap method (percentile, or basic for worst/best/gap/period).
    Returns the text without a trailing newline.
    """
    level = round(100 * summary.confidence)
    if summary.n_mappings is None:
        unit = "n"
    else:
        unit = "prompts" if (summary.trials_per_cell or 1) > 1 else "mappings"
    lines = [title] if title else []
    header = f"{'residue':>7}  {unit:>8}  {'correct':>7}  {'acc %':>6}"
    lines.append(f"{header}  {level}% CI ({summary.ci_method})")
    for r in range(summary.modulus):
        lines.append(
            f"{r:>7}  {_count(summary.counts[r]):>8}  {_count(summary.successes[r]):>7}  "
            f"{100 * summary.accuracy[r]:>6.1f}  "
            f"{_interval(100 * summary.ci_low[r], 100 * summary.ci_high[r])}"
        )
    intervals = summary.stat_intervals or {}
    lines.append(
        f"mean {100 * summary.mean:.1f}%   worst {100 * summary.worst:.1f}% (r={summary.worst_residue})"
        f"   best {100 * summary.best:.1f}% (r={summary.best_residue})"
    )
    shown = [name for name in ("mean", "worst", "best") if name in intervals]
    if shown:
        parts = [f"{name} {_interval(*(100 * v for v in intervals[name]))}{_method(summary, name)}" for name in shown]
        lines.append(f"{level}% CI: " + "   ".join(parts))
    gap = f"gap {summary.gap_points:.1f} points"
    if "gap_points" in intervals:
        gap += f"   {level}% CI {_interval(*intervals['gap_points'])}{_method(summary, 'gap_points')}"
    lines.append(gap)
    if summary.stride is not None:
        diff = summary.period_difference_points
        period = f"period difference mean|A(r)-A(r+{summary.stride})| {diff:.1f} points"
        if "period_difference_points" in intervals:
            period += (
                f"   {level}% CI {_interval(*intervals['period_difference_points'])}"
                f"{_method(summary, 'period_difference_points')}"
            )
        lines.append(period)
        fold = " ".join(f"{100 * a:.1f}" for a in summary.fold["accuracy"])
        lines.append(f"fold by S={summary.stride} (acc % per phase 0..{summary.stride - 1}): {fold}")
    test = summary.uniformity
    detail = f"df={test.df}" if test.df is not None else f"{test.n_permutations} permutations"
    lines.append(f"uniformity: {test.method}, chi2 = {test.statistic:.2f} ({detail}), p = {_p(test.p_value)}")
    if test.note:
        lines.append(f"note: {test.note}")
    return "\n".join(lines)


def effect_cell(verdict: dict) -> str | None:
    """'97.7 [95.5, 100.0] points': a verdict's phase amplitude with its interval; None for results written before
    the effect size was recorded."""
    if verdict.get("effect_points") is None:
        return None
    effect = f"{verdict['effect_points']:.1f}"
    if verdict.get("effect_ci"):
        effect += " [{:.1f}, {:.1f}]".format(*verdict["effect_ci"])
    return f"{effect} points"


def mde_cell(verdict: dict) -> str | None:
    """'12' (points), 'none' (no drop up to 0% is detectable) or None (not computed): a verdict's minimum
    detectable effect (of the test it rests on)."""
    mde = verdict.get("mde")
    if not mde:
        return None
    return "none" if mde["points"] is None else f"{mde['points']:g}"


def _position_design(verdict: dict) -> tuple[dict | None, dict | None]:
    """(what the position design alone says, the grid-shift test's MDE) of a verdict resting on the grid shift;
    (None, None) otherwise. Results written before the grid-shift test had an MDE of its own kept the position
    design's as the verdict's."""
    position = verdict.get("position_design")
    if position is None:
        return None, None
    if "mde" in position:
        return position, verdict.get("mde")
    return {**position, "mde": verdict.get("mde")}, None


def verdict_label(verdict: dict) -> str:
    """The verdict's wording for a table, where its note is not shown: a replicated pattern below the minimum
    effect whose amplitude interval also reaches past it gets ', size unresolved' (it may be well above)."""
    label, ci, min_effect = verdict["verdict"], verdict.get("effect_ci"), verdict.get("min_effect_points")
    if min_effect is not None and ci and label == below_min_effect(min_effect) and ci[1] >= min_effect:
        label += ", size unresolved"
    return label


def verdict_cell(verdict: dict | None) -> str | None:
    """'phase-sensitive (97.7 [95.5, 100.0] points, p 4e-08, P=8; MDE 12)': a table cell for a verdict dict; a
    verdict that rests on the grid shift names it and gives the position design's finding after it. None for
    results without one. Results written before the effect size was recorded show the p-value only."""
    if not verdict:
        return None
    effect, mde = effect_cell(verdict), mde_cell(verdict)
    parts = [effect] if effect else []
    position, grid_mde = _position_design(verdict)
    if position is not None:
        grid_mde = mde_cell({"mde": grid_mde})
        parts.append(
            f"grid shift p {verdict['p_value']:.2g}, P={verdict['period']}" + (f"; MDE {grid_mde}" if grid_mde else "")
        )
        alone, position_mde = effect_cell(position), mde_cell(position)
        detail = ", ".join(
            [
                *([alone] if alone else []),
                f"p {position['p_value']:.2g}",
                *([f"MDE {position_mde}"] if position_mde else []),
            ]
        )
        parts.append(f"position design: {position['verdict']}, {detail}")
        return f"{verdict_label(verdict)} ({', '.join(parts[:-1])}; {parts[-1]})"
    parts.append(f"p {verdict['p_value']:.2g}, P={verdict['period']}" + (f"; MDE {mde}" if mde else ""))
    shifted = verdict.get("grid_shift")
    if shifted:  # written before the verdict rested on the grid shift
        moves = "moves with" if shifted["moves_with_grid"] else "does not move with"
        parts.append(f"grid shift: {moves} the grid, p {shifted['p_value']:.2g}")
    return f"{verdict_label(verdict)} ({', '.join(parts)})"


def format_mde(mde: dict | None, test: str = "") -> str:
    """'minimum detectable effect 11.8 points (...)' from a verdict's ``mde`` record; ``test`` names the test
    it belongs to ('grid shift', 'position design') where a verdict shows two."""
    label = f"{test}: minimum detectable effect" if test else "minimum detectable effect"
    if mde is None:
        return f"{label}: not computed"
    phase = "grid phase" if "grid phase" in mde.get("what", "") else "phase"
    what = (
        f"(a drop at one {phase} found with {100 * mde['power']:.0f}% power, {mde['simulations']} simulated runs "
        f"on {mde['distinct_prompts']} distinct prompts)"
    )
    if mde["points"] is None:
        return f"{label}: none up to a drop to 0% {what}"
    return f"{label} {mde['points']:g} points {what}"


def format_verdict(verdict: dict) -> str:
    """One block of text for a `PhaseVerdict` dict: the verdict with its rule, the effect size with its
    interval, the test at the stride and the placebos, the minimum detectable effect and the smooth trend."""
    test, trend = verdict["test"], verdict["trend"]
    placebo = ", ".join(f"P={p['period']}: p={_p(p['p_value'])}" for p in verdict["placebo"]) or "none"
    low, high = trend["ci"]
    shifted = verdict.get("grid_shift")
    position, grid_mde = _position_design(verdict)
    effect = f"phase amplitude {verdict['effect_points']:.1f} points"
    if verdict.get("effect_ci"):
        effect += " [{:.1f}, {:.1f}]".format(*verdict["effect_ci"])
    if position is not None:  # the verdict rests on the grid shift: its numbers first, then the position design's
        effect = (
            f"grid-phase {effect}, grid-shift p = {_p(verdict['p_value'])}; position design: "
            f"{effect_cell(position) or 'no effect size'}"
        )
    test_p = position["p_value"] if position is not None else verdict["p_value"]
    df = test.get("df") or ["?", "?"]
    lines = [
        f"phase verdict at period {verdict['period']}: {verdict['verdict'].upper()} ({verdict.get('rule', '')})",
        f"{effect}; test p = {_p(test_p)} (phase frequencies against their neighbours: {df[0]} phase and "
        f"{df[1]} neighbour terms, {test.get('n_distinct_prompts', '?')} distinct of {test.get('n_prompts', '?')} "
        "prompts); "
        f"placebo periods: {placebo}",
        *(
            [format_mde(grid_mde, "grid shift"), format_mde(position["mde"], "position design")]
            if position is not None
            else [format_mde(verdict.get("mde"))]
        ),
        f"smooth trend {trend['slope_points_per_100_tokens']:+.1f} points per 100 tokens of t_K "
        f"[{low:+.1f}, {high:+.1f}] over t_K {trend['first_position']}..{trend['last_position']}",
    ]
    if verdict.get("basis"):
        lines.append(f"rests on: {verdict['basis']}")
    if shifted:
        lines.append(
            f"grid shift over offsets {shifted['offsets']}: profiles by grid phase spread "
            f"{shifted['grid_spread_points']:.1f} points, by position phase {shifted['position_spread_points']:.1f} "
            f"(shuffle p = {_p(shifted['p_value'])}, {shifted['n_shuffles']} shuffles)"
        )
    if position is not None:
        lines.append(
            f"grid-phase profile (points, phases 0..{shifted['period'] - 1}): "
            + " ".join(f"{v:+.1f}" for v in shifted["profile_points"])
        )
        lines.append(f"position design alone: {position['verdict']}")
    if verdict.get("note"):
        lines.append(f"note: {verdict['note']}")
    return "\n".join(lines)


def format_headline(summary: ResidueSummary, verdict: dict | None) -> str:
    """The finding of a probe in a few lines: the mean with its interval, worst and best residue, the gap with
    its interval (all over the residue summary's cells), the verdict's own mean over distinct prompts where it
    has one, then the phase verdict (`format_verdict`) when the result has one."""
    intervals = summary.stat_intervals or {}
    mean = f"mean {100 * summary.mean:.1f}%"
    if "mean" in intervals:
        mean += " [{:.1f}, {:.1f}]".format(*(100 * v for v in intervals["mean"]))
    # the verdict's mean weighs each distinct prompt once (resampled by unit), the summary's every prompt and copy:
    # they can differ by points, and the chance rule reads the first, so both are printed, each named
    test = (verdict or {}).get("test") or {}
    if test.get("mean_ci") and test.get("mean") is not None:
        mean += "; distinct prompts {:.1f}% [{:.1f}, {:.1f}] (the chance rule's)".format(
            100 * test["mean"], *(100 * v for v in test["mean_ci"])
        )
    gap = f"gap {summary.gap_points:.1f} points"
    if "gap_points" in intervals:
        gap += " [{:.1f}, {:.1f}]".format(*intervals["gap_points"])
    lines = [
        f"{mean}; worst {100 * summary.worst:.1f}% (r={summary.worst_residue}), best {100 * summary.best:.1f}% "
        f"(r={summary.best_residue}); {gap}"
    ]
    if verdict:
        lines.append(format_verdict(verdict))
    return "\n".join(lines)
