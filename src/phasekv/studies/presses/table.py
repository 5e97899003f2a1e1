"""The presses profile's table (markdown + JSON) and figure (accuracy by residue per method), from its cells.

Columns: mean, worst and best residue (percent), gap = best - worst with its 95% interval (basic bootstrap for
lookup), the period difference mean_r |A(r) - A(r+S)| at the method's chunk length S (else the probe's default
S = modulus // 2), the robust phase test (`result["phase_test"]`: p-value and verdict; "-" where the result has
none) and the KV entries the method keeps (fraction of the context for kvpress presses, counted from the cache
after each prefill; pooled entries + local tokens over the sequence for phasekv pooling; 1 for the full cache),
with the share of selections cut inside a tie where the press ranks entries by score.
"""

from __future__ import annotations

import json
from pathlib import Path

import altair as alt

from phasekv.charts import vega
from phasekv.files import write_atomic
from phasekv.scoring.press_pool import PoolSpec
from phasekv.scoring.press_spec import parse_press
from phasekv.stats.format import verdict_cell
from phasekv.studies.probe.like import eval_command, remeasure_list
from phasekv.studies.probe.result import ProbeResult


def kept_fraction(result: ProbeResult) -> float:
    """KV entries kept at the query, as a fraction (see the module docstring)."""
    press = result.model.get("press")
    if press is None:
        return 1.0
    if "kv_entries" in press:
        return press["kv_entries"]["kept_fraction"]
    spec = parse_press(press["spec"])
    assert isinstance(spec, PoolSpec)
    length = result.controls["query_positions"][0] + 1
    return spec.cache_entries(length) / length


def cut_tie_fraction(result: ProbeResult) -> float | None:
    """The share of the press's selections cut inside a run of equal scores (`scoring.press.CutTieCounter`), or None
    where it was not counted (no press, pooling, a chunked press, a result from before the count)."""
    ties = (result.model.get("press") or {}).get("ties_at_cut") or {}
    return ties.get("fraction") if ties.get("checked") else None


def _kept_cell(r: dict) -> str:
    tied = r.get("ties_at_cut")
    return f"{r['kept_fraction']:.2f}" + (f" (cut in a tie: {100 * tied:.0f}%)" if tied else "")


def press_row(method, probe: str, result: ProbeResult, cell: str | Path) -> dict:
    """The table row of one cell (`cell`: its result file, which the row's command re-measures)."""
    s = result.residue_summary
    intervals = s.stat_intervals or {}
    phase = result.phase_verdict
    return {
        "method": method.name,
        "label": method.label,
        "press": method.spec_text,
        "probe": probe,
        "mean": 100 * s.mean,
        "worst": 100 * s.worst,
        "best": 100 * s.best,
        "gap": s.gap_points,
        "gap_ci": intervals.get("gap_points"),
        "stride": result.stride.value,
        "stride_source": result.stride.source,
        "period_diff": s.period_difference_points,
        "period_diff_ci": intervals.get("period_difference_points"),
        "phase_p": None if phase is None else phase["p_value"],
        "phase_verdict": verdict_cell(phase),
        "uniformity_p": s.uniformity.p_value,
        "kept_fraction": kept_fraction(result),
        "ties_at_cut": cut_tie_fraction(result),
        "learned": result.learned(),
        "command": eval_command(result.model, probe, cell),
        "accuracy": s.accuracy,
        "ci_low": s.ci_low,
        "ci_high": s.ci_high,
        "wall_time_s": result.wall_time_s,
    }


def _interval(value: float | None, ci: list | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" + (f" [{ci[0]:.1f}, {ci[1]:.1f}]" if ci else "")


def markdown_press_table(rows: list[dict]) -> str:
    lines = [
        "| Method | probe | mean | worst | gap (95% CI) | period diff. at S (95% CI) | phase test p | verdict | "
        "KV kept | s |",
        "|---|---|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in rows:
        period = "-" if r["stride"] is None else f"{_interval(r['period_diff'], r['period_diff_ci'])} (S={r['stride']})"
        p = "-" if r["phase_p"] is None else f"{r['phase_p']:.3g}"
        verdict = r["phase_verdict"] or "-"
        lines.append(
            f"| {r['label']} | {r['probe']} | {r['mean']:.1f} | {r['worst']:.1f} | {_interval(r['gap'], r['gap_ci'])} "
            f"| {period} | {p} | {verdict} | {_kept_cell(r)} | {r['wall_time_s']:.0f} |"
        )
    lines.append(
        "\nAccuracy in percent (full-vocabulary top-1 of the answer), by target-key position mod the probe's modulus; "
        "gap = best - worst residue in points; S = the press's chunk length (else modulus // 2); KV kept = cache "
        "entries kept per layer and head over the compressed tokens (cut in a tie: the share of selections whose "
        "last kept and first dropped entries score the same, so that top-k's tie order, not the press, picks); "
        "not judged: at chance = the lower end of the "
        "mean's 95% interval is at most twice the name-guessing level 2/records (a wide interval does this too)."
    )
    lines.append(remeasure_list((f"{r['label']}, {r['probe']}", r.get("command")) for r in rows))
    return "\n".join(lines)


def press_residues_spec(rows: list[dict]) -> dict:
    """Accuracy by residue, one line per method with its 95% band, one panel per probe (a Vega-Lite spec)."""
    points = [
        {
            "method": r["label"],
            "probe": r["probe"],
            "residue": residue,
            "accuracy": 100 * accuracy,
            "low": 100 * low,
            "high": 100 * high,
        }
        for r in rows
        for residue, (accuracy, low, high) in enumerate(zip(r["accuracy"], r["ci_low"], r["ci_high"], strict=True))
    ]
    methods = list(dict.fromkeys(r["label"] for r in rows))
    color = alt.Color("method:N", title=None, sort=methods, legend=alt.Legend(orient="right"))
    last = max(len(r["accuracy"]) for r in rows) - 1
    x = alt.X("residue:Q", title="target position mod M", scale=alt.Scale(domain=[0, last], nice=False))
    x = x.axis(tickMinStep=1, format="d")
    y = alt.Y("accuracy:Q", title="accuracy (%)", scale=alt.Scale(domain=[0, 100]))
    base = alt.Chart().encode(x=x, color=color)
    band = base.mark_area(opacity=0.12).encode(y="low:Q", y2="high:Q", color=color.legend(None))
    line = base.mark_line(point=alt.OverlayMarkDef(size=18)).encode(
        y=y, tooltip=["method:N", "residue:Q", "accuracy:Q"]
    )
    chart = alt.layer(band, line, data=vega.values(points)).resolve_legend(color="independent")
    chart = chart.properties(width=420, height=260)
    chart = chart.facet(column=alt.Column("probe:N", title=None)).properties(
        title="Accuracy by residue per method, 95% bands",
        description="accuracy by target position mod M for every compression method, one panel per probe",
    )
    return vega.finish(chart)


def write_press_table(profile, results: dict[str, dict[str, dict]], out: Path) -> list[dict]:
    """Write out/table.md, out/presses.json and out/residues.png; returns the rows."""
    methods = {m.name: m for m in profile.methods}
    rows = [
        press_row(methods[name], probe, ProbeResult.from_dict(result, str(cell)), cell)
        for probe, by in results.items()
        for name, result in by.items()
        for cell in [out / "cells" / f"{name}-{probe}.json"]
    ]
    table = markdown_press_table(rows)
    write_atomic(out / "table.md", lambda tmp: Path(tmp).write_text(f"# {profile.description}\n\n{table}\n"))
    payload = {"profile": profile.name, "description": profile.description, "rows": rows}
    write_atomic(out / "presses.json", lambda tmp: Path(tmp).write_text(json.dumps(payload, indent=2) + "\n"))
    vega.write_png(press_residues_spec(rows), out / "residues.png")
    return rows
