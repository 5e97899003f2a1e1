"""Accuracy by residue (the paper's Figure 2 and needle figure), the summary table, and beside them
accuracy by absolute target position (`positions`)."""

from __future__ import annotations

import html
import json
from pathlib import Path

import altair as alt

from phasekv.charts import vega
from phasekv.charts.inputs import Inputs
from phasekv.charts.labels import fmt, num, nums
from phasekv.charts.vega import figure_html
from phasekv.stats.format import effect_cell, mde_cell, verdict_cell
from phasekv.studies.probe import positions


def section(inputs: Inputs) -> dict | None:
    results = inputs.of("residues")
    if not results:
        return None
    series = []
    for r in results:
        d, p = r.data, r.typed
        s = p.residue_summary
        compressed = p.compressed
        stride = p.stride.value if compressed else None
        training = p.extra("training") or {}
        # folding overlays the periods the verdict reads: the stride's, else the period of the phase test
        period = stride or (p.phase_verdict or {}).get("period")
        series.append(
            {
                "name": r.name,
                "file": r.path.as_posix(),
                "probe": p.probe,
                "protocol": p.protocol,
                "modulus": s.modulus,
                "stride": stride,
                "fold_by": period if period and period < s.modulus else None,
                "compressed": compressed,
                "full": not compressed,
                "accuracy": nums(s.accuracy, 3, 100),
                "low": nums(s.ci_low, 3, 100),
                "high": nums(s.ci_high, 3, 100),
                "interval": s.ci_method,
                "mean": num(100 * s.mean, 2),
                "mean_ci": nums((s.stat_intervals or {}).get("mean") or [], 2, 100) or None,
                "worst": num(100 * s.worst, 2),
                "best": num(100 * s.best, 2),
                "gap": num(s.gap_points, 2),
                "gap_ci": nums((s.stat_intervals or {}).get("gap_points") or [], 2) or None,
                "period_diff": num(s.period_difference_points, 2),
                "p_value": num(s.uniformity.p_value, 4),
                "val_loss": num(training.get("final_val_loss"), 3),
                "learned": p.learned(),
                "verdict": verdict_cell(p.phase_verdict),
                "phase": _phase(p.phase_verdict),
                "positions": positions.series_positions(d),
            }
        )
    return {
        "series": series,
        "probes": sorted({x["probe"] for x in series}),
        "without_records": [x["name"] for x in series if x["positions"] is None],
        "no_records_note": positions.NO_RECORDS,
    }


def _phase(test: dict | None) -> dict | None:
    """The summary's pieces of a phase verdict, worded by `stats.format`; None for results without one."""
    if not test:
        return None
    return {"verdict": test["verdict"], "effect": effect_cell(test), "mde": mde_cell(test)}


ROLE, CONTROL, UNLEARNED_CONTROL = "model", "full attention", "full attention, not learned"
ROLES = (ROLE, CONTROL, UNLEARNED_CONTROL)  # legend order
COLOURS = {ROLE: vega.SELECTED, CONTROL: "#8a8a8a", UNLEARNED_CONTROL: "#d4d4d4"}
DASHES = {ROLE: [1, 0], CONTROL: [5, 3], UNLEARNED_CONTROL: [5, 3]}


def _rows(data: dict) -> list[dict]:
    """One data row per drawn point: a panel per compressed model (per model when none
    is compressed), holding that model and every full-attention control of the same modulus (folded by the panel's
    period); plus a row per period boundary and per boundary-phase residue of the panel's model."""
    full = [x for x in data["series"] if x["full"]]
    rows = []
    for order, panel in enumerate(panels(data)):
        chance = " (not shown above guessing)" if panel["learned"] is False else ""
        stride = f", S={panel['stride']}" if panel["stride"] else ""
        where = {
            "panel": panel["name"],
            "title": panel["name"] + stride + chance,
            "order": order,
            "fold_by": panel["fold_by"],
        }
        drawn = [(panel, ROLE)] + [
            (f, CONTROL if f["learned"] is not False else UNLEARNED_CONTROL)
            for f in full
            if f is not panel and f["modulus"] == panel["modulus"]
        ]
        for s, role in drawn:
            for residue in range(s["modulus"]):
                values = {k: s[k][residue] for k in ("accuracy", "low", "high")}
                rows.append({**where, "kind": "series", "model": s["name"], "role": role, "residue": residue, **values})
        if panel["stride"]:
            m, stride = panel["modulus"], panel["stride"]
            rows += [{**where, "kind": "boundary", "residue": b} for b in range(stride, m, stride)]
            rows += [{**where, "kind": "boundary phase", "residue": r} for r in range(stride - 1, m, stride)]
    return rows


def panels(data: dict) -> list[dict]:
    """The series drawn in panels of their own: the compressed ones (all when none is compressed)."""
    return [x for x in data["series"] if not x["full"]] or data["series"]


def panel_names(data: dict) -> list[str]:
    return [x["name"] for x in panels(data)]


def drawn(data: dict) -> dict:
    """What the residue figure draws, so that its title, legend and caption promise nothing else: `rules` (period
    boundaries: a stride below the modulus), `triangles` (the boundary phase S-1: a stride), `controls`
    (full-attention series behind a compressed model), `compressed` (panels of compressed models), `fold` (a
    panel whose periods can be overlaid) and the `roles` of the series drawn, in legend order."""
    rows = _rows(data)
    return {
        "rules": any(r["kind"] == "boundary" for r in rows),
        "triangles": any(r["kind"] == "boundary phase" for r in rows),
        "controls": any(r.get("role", ROLE) != ROLE for r in rows),
        "compressed": any(s["compressed"] for s in panels(data)),
        "fold": any(s["fold_by"] for s in panels(data)),
        "roles": [role for role in ROLES if any(r.get("role") == role for r in rows)],
    }


def spec(data: dict) -> dict:
    """Accuracy by residue with 95% bands, one panel per compressed model with full attention dashed
    behind it, period boundaries (dashed rules) and the boundary phase S-1 (triangles under the axis) where there
    is a stride. Params: `model` ("all" or one panel) and `fold` (overlay the periods: x = residue mod the stride,
    else mod the phase test's period, the first period drawn full, later ones lighter; a checkbox only where a panel
    has periods to overlay). The x axis is titled by what it shows: the modulus, or the period once folded. Title,
    legend and text alternative name only what is drawn (`drawn`)."""
    shown, marks = panels(data), drawn(data)
    choices = ["all", *panel_names(data)]
    model = alt.param(name="model", value="all", bind=alt.binding_select(options=choices, name="model "))
    checkbox = {"bind": alt.binding_checkbox(name="fold periods ")} if marks["fold"] else {}
    fold = alt.param(name="fold", value=False, **checkbox)
    # explicit x domains (no extent of a layer that folding or the model choice empties)
    width = max(s["modulus"] for s in shown)
    folded = {s["name"]: s["fold_by"] or s["modulus"] for s in shown}
    folded_width = f"({json.dumps(folded)})[model] || {max(folded.values())}"
    domain = alt.ExprRef(expr=f"[-0.5, (fold ? {folded_width} : {width}) - 0.5]")
    x = alt.X("x:Q", scale=alt.Scale(domain=domain, nice=False)).axis(tickMinStep=1, format="d")
    y = alt.Y("accuracy:Q", title="accuracy (%)", scale=alt.Scale(domain=[-8, 100]))
    # a control at chance is drawn apart (lighter), so that its flat line at 0 is not read as the reference
    # the roles drawn only (a legend entry for a series that is not there would promise it)
    present = marks["roles"]
    roles = alt.Scale(domain=present, range=[COLOURS[r] for r in present])
    dashes = alt.Scale(domain=present, range=[DASHES[r] for r in present])
    # one legend from the lines (colour and dash by role, so its swatches are the lines); the bands fill by role
    # with no legend of their own (sharing the lines' would draw its swatches as faint as the bands); none for a
    # model drawn alone
    legend = alt.Legend(orient="top", symbolType="stroke") if len(present) > 1 else None
    color = alt.Color("role:N", title=None, scale=roles, legend=legend)
    dash = alt.StrokeDash("role:N", title=None, scale=dashes, legend=legend)
    folding = "fold && datum.fold_by"
    position = f"{folding} ? datum.residue % datum.fold_by : datum.residue"
    series = alt.Chart().transform_filter("datum.kind == 'series'")
    series = series.transform_calculate(x=position, period=f"{folding} ? floor(datum.residue / datum.fold_by) : 0")
    lines = ["model:N", "period:Q"]
    band = series.mark_area(opacity=0.15).encode(
        x=x, y="low:Q", y2="high:Q", fill=alt.Fill("role:N", scale=roles, legend=None), detail=lines
    )
    tooltip = ["model:N", "residue:Q", "accuracy:Q", "low:Q", "high:Q"]
    later = alt.condition("datum.period > 0", alt.value(0.4), alt.value(1.0))  # folded: the later periods lighter
    line = series.mark_line(point=alt.OverlayMarkDef(size=18)).encode(
        x=x, y=y, color=color, strokeDash=dash, opacity=later, detail=lines, tooltip=tooltip
    )
    boundary = alt.Chart().transform_filter(f"datum.kind == 'boundary' && !({folding})")
    boundary = boundary.transform_calculate(x="datum.residue - 0.5").mark_rule(color="#555", strokeDash=[4, 4])
    phase = alt.Chart().transform_filter("datum.kind == 'boundary phase'")
    phase = phase.transform_calculate(x=position, accuracy="-5")
    phase = phase.mark_point(shape="triangle-down", filled=True, color="#444", size=50)
    chart = alt.layer(band, line, boundary.encode(x=x), phase.encode(x=x, y=y)).properties(width=280, height=200)
    chart = chart.resolve_legend(fill="independent")  # else the bands' missing legend removes the lines' too
    facet = alt.Facet("title:N", title=None, sort=alt.SortField("order"))
    chart = chart.facet(facet=facet, columns=3, data=vega.values(_rows(data)))
    chart = chart.transform_filter("model == 'all' || datum.panel == model").add_params(model, fold)
    chart = chart.resolve_axis(x="independent")  # an x axis per panel, none under an empty grid cell
    chart = vega.finish(chart.properties(title=title(marks), description=description(marks)))
    folded, unfolded = (json.dumps(_x_title(shown, f)) for f in (True, False))
    return vega.axis_title(chart, "x", f"fold ? {folded} : {unfolded}")


def _x_title(shown: list[dict], folded: bool) -> str:
    """The residue figure's x axis title: the modulus, or once folded the period, by number where the panels share
    it."""
    if not folded:
        moduli = {s["modulus"] for s in shown}
        return f"target position mod {moduli.pop()}" if len(moduli) == 1 else "target position mod M (each panel's)"
    periods = {s["fold_by"] or s["modulus"] for s in shown}
    if len(periods) == 1:
        return f"target position mod {periods.pop()}, periods overlaid"
    return "target position mod each panel's period, periods overlaid"


def title(marks: dict) -> str:
    """The figure's title: the bands, then the rules and triangles where they are drawn."""
    parts = ["Accuracy by residue with 95% bands"]
    if marks["rules"]:
        parts.append("dashed rules: period boundaries")
    if marks["triangles"]:
        parts.append("triangles: boundary phase S-1")
    return "; ".join(parts)


def description(marks: dict) -> str:
    """The figure's text alternative: its panels, and the full-attention series where they are drawn."""
    panels_of = "one panel per compressed model" if marks["compressed"] else "one panel per model"
    controls = ", full attention dashed behind it" if marks["controls"] else ""
    return f"Accuracy by residue with 95% bands, {panels_of}{controls}"


def png(data: dict, inputs: Inputs, out_dir: Path) -> list[Path]:
    """The residue figure and, beside it, accuracy by absolute position."""
    paths = [vega.write_png(spec(data), out_dir / "residues.png")]
    if any(s["positions"] is not None for s in data["series"]):
        paths.append(vega.write_png(positions.spec(data["series"], panel_names(data)), out_dir / "positions.png"))
    return paths


def section_html(d: dict) -> str:
    probes = " and ".join(d["probes"])
    has_positions = any(s["positions"] is not None for s in d["series"])
    position_figure = ""
    if has_positions:
        position_spec = positions.spec(d["series"], panel_names(d))
        position_figure = f"""<figure>{figure_html("fig-positions", position_spec, link="model")}
<figcaption>Accuracy against the absolute target position t<sub>K</sub>, in up to 12 bins of equal width, with
Wilson 95% bands (prompts counted as independent, so the bands are narrower than the residue plot's, which resample
whole units); dashed: the model's mean accuracy, thin bars: each bin's width. A smooth trend here (a step, a slope,
a dip in the middle) can leak into the residue pattern; a phase effect shows as a pattern by residue with no
matching trend here.{_positions_note(d)}</figcaption></figure>"""
    choices = panel_names(d)
    rows = "".join(_residue_row(s, s["name"] in choices) for s in d["series"])
    return f"""
<section id="sec-residues"><h2>Accuracy by residue</h2>
<p class="sub">{html.escape(probes)} accuracy grouped by the target position modulo a multiple of the stride (of the
period the phase test reads, for a model without a stride).</p>
<figure>{figure_html("fig-residues", spec(d), link="model")}
<figcaption>Accuracy by target-key position (residue) with 95% bands ({html.escape(_interval(d))}), {_caption(d)}
Choose a model (or click its row in the table, or focus a row and use ↑/↓) to see its panel alone, beside its
accuracy by position{_fold_caption(d)}</figcaption></figure>
{position_figure}
<table class="data select" id="residue-table" aria-label="Models: click one to plot it alone">
<thead><tr><th>Model</th><th>S</th><th>val. loss</th><th>mean</th><th>worst</th><th>best</th>
<th>gap [95% CI]</th><th>p (uniform)</th><th>phase verdict</th></tr></thead>
<tbody>{rows}</tbody></table>
<p class="small">Accuracies in percent; gap is best minus worst residue in percentage points; p is the uniformity
test across residues (the paper's moment-matched figure, which a smooth effect of position can fool). The phase
verdict compares the phase frequencies k/P with their neighbours after each unit's smooth curve, and reads
“phase-sensitive” only when that test rejects and the phase amplitude (best minus worst phase, points, with its
95% interval) clears the minimum effect; MDE is the smallest drop at one phase the run would have found with 80%
power. Models whose mean is not clearly above guessing are marked “not shown above guessing”.</p>
</section>"""


def _caption(d: dict) -> str:
    """What the residue figure draws, in words (`drawn`)."""
    marks = drawn(d)
    text = "one panel per model."
    if marks["compressed"]:
        behind = " with full attention dashed in gray behind it" if marks["controls"] else ""
        text = f"one panel per compressed model (red){behind}."
    if marks["rules"]:
        text += " Dashed vertical rules mark the period boundaries every S positions."
    if marks["triangles"]:
        text += " Triangles under the axis mark the boundary phase S−1."
    return text


def _fold_caption(d: dict) -> str:
    if not drawn(d)["fold"]:
        return "."
    return "; “fold periods” overlays the periods (the first drawn full, later ones lighter)."


def _with_ci(value, ci) -> str:
    return fmt(value) + (f" [{fmt(ci[0])}, {fmt(ci[1])}]" if ci else "")


def _name_cell(s: dict) -> str:
    chance = ' <span class="chance">not shown above guessing</span>' if s["learned"] is False else ""
    return f"<td>{html.escape(s['name'])}{chance}</td>"


def _residue_row(s: dict, selectable: bool) -> str:
    """A row of the residue table; a selectable one (a model with a panel) sets the figures' `model`."""
    cells = [
        "–" if s["stride"] is None else str(s["stride"]),
        fmt(s["val_loss"], 3),
        fmt(s["mean"]),
        fmt(s["worst"]),
        fmt(s["best"]),
        _with_ci(s["gap"], s["gap_ci"]),
        "–" if s["p_value"] is None else f"{s['p_value']:.2g}",
    ]
    foldable = ' data-foldable="1"' if s["fold_by"] else ""
    value = html.escape(json.dumps(s["name"]))  # data-value holds the param's value as JSON
    select = f' data-param="model" data-value="{value}" tabindex="0"{foldable}' if selectable else ""
    verdict = f'<td class="text">{html.escape(s["verdict"] or "–")}</td>'
    return f"<tr{select}>{_name_cell(s)}" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + verdict + "</tr>"


def summary_html(d: dict) -> str:
    """The report's opening: each model's mean, gap, phase verdict with its effect size and minimum detectable
    effect, in the words of `stats.format`."""

    def row(s: dict) -> str:
        phase = s["phase"] or {}
        cells = [_with_ci(s["mean"], s["mean_ci"]), _with_ci(s["gap"], s["gap_ci"])]
        cells += [phase.get("verdict") or "–", phase.get("effect") or "–", phase.get("mde") or "–"]
        return f"<tr>{_name_cell(s)}" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>"

    return f"""<table class="data" id="summary-table" aria-label="Each model's finding">
<thead><tr><th>Model</th><th>mean % [95% CI]</th><th>gap, points [95% CI]</th><th>phase verdict</th>
<th>phase amplitude [95% CI]</th><th>MDE, points</th></tr></thead>
<tbody>{"".join(row(s) for s in d["series"])}</tbody></table>
<p class="small">{html.escape(" and ".join(d["probes"]))} accuracy over residues; gap is best minus worst residue; the
phase verdict and its amplitude (best minus worst phase) are explained under “Accuracy by residue” below, MDE is the
smallest drop at one phase the run would have found with 80% power.</p>"""


def _positions_note(d: dict) -> str:
    if not d["without_records"]:
        return ""
    names = ", ".join(d["without_records"])
    return (
        f' <span class="small">No position plot for {html.escape(names)}: {html.escape(d["no_records_note"])}.</span>'
    )


def _interval(d: dict) -> str:
    methods = sorted({s["interval"] for s in d["series"]})
    return ", ".join(methods)
