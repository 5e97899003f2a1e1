"""Accuracy by residue (the paper's Figure 2 and needle figure), the summary table, and beside them
accuracy by absolute target position (`positions`)."""

from __future__ import annotations

import json
from pathlib import Path

import altair as alt

from . import positions, vega
from .common import num, nums
from .load import Inputs


def _verdict(test: dict | None) -> str | None:
    """'phase-sensitive (P=8, p=0.004)' from a result's phase_test; None for results without one."""
    if not test:
        return None
    return f"{test['verdict']} (P={test['period']}, p={test['p_value']:.2g})"


def section(inputs: Inputs) -> dict | None:
    results = inputs.of("residues")
    if not results:
        return None
    series = []
    for r in results:
        d, p = r.data, r.typed
        s = p.summary
        compressed = p.compressed
        stride = p.stride.value if compressed else None
        training = p.extra("training") or {}
        series.append(
            {
                "name": r.name,
                "file": r.path.as_posix(),
                "probe": p.probe,
                "protocol": p.protocol,
                "modulus": s.modulus,
                "stride": stride,
                "compressed": compressed,
                "full": not compressed,
                "accuracy": nums(s.accuracy, 3, 100),
                "low": nums(s.ci_low, 3, 100),
                "high": nums(s.ci_high, 3, 100),
                "interval": s.ci_method,
                "mean": num(100 * s.mean, 2),
                "worst": num(100 * s.worst, 2),
                "best": num(100 * s.best, 2),
                "gap": num(s.gap_points, 2),
                "gap_ci": nums((s.stat_intervals or {}).get("gap_points") or [], 2) or None,
                "period_diff": num(s.period_difference_points, 2),
                "p_value": num(s.uniformity.p_value, 4),
                "val_loss": num(training.get("final_val_loss"), 3),
                "learned": p.learned(),
                "verdict": _verdict(p.phase_test),
                "positions": positions.series_positions(d),
            }
        )
    return {
        "series": series,
        "probes": sorted({x["probe"] for x in series}),
        "without_records": [x["name"] for x in series if x["positions"] is None],
        "no_records_note": positions.NO_RECORDS,
    }


def _rows(data: dict) -> list[dict]:
    """One data row per drawn point: a panel per compressed model (per model when none
    is compressed), holding that model and every full-attention control of the same modulus; plus a row
    per period boundary and per boundary-phase residue of the panel's model."""
    full = [x for x in data["series"] if x["full"]]
    rows = []
    for order, panel in enumerate(panels(data)):
        chance = " (not shown above guessing)" if panel["learned"] is False else ""
        stride = f", S={panel['stride']}" if panel["stride"] else ""
        where = {
            "panel": panel["name"],
            "title": panel["name"] + stride + chance,
            "order": order,
            "stride": panel["stride"],
        }
        drawn = [(panel, "model")] + [
            (f, "full attention") for f in full if f is not panel and f["modulus"] == panel["modulus"]
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


def spec(data: dict) -> dict:
    """Accuracy by residue with 95% bands, one panel per compressed model with full attention dashed
    behind it, period boundaries (dashed rules) and the boundary phase S-1 (triangles under the axis).
    Params: `model` ("all" or one panel) and `fold` (overlay the periods: x = residue mod S, the first
    period solid, later ones dashed)."""
    shown = panels(data)
    choices = ["all", *panel_names(data)]
    model = alt.param(name="model", value="all", bind=alt.binding_select(options=choices, name="model "))
    fold = alt.param(name="fold", value=False, bind=alt.binding_checkbox(name="fold periods "))
    # explicit x domains (no extent of a layer that folding or the model choice empties)
    width = max(s["modulus"] for s in shown)
    folded = {s["name"]: s["stride"] or s["modulus"] for s in shown}
    folded_width = f"({json.dumps(folded)})[model] || {max(folded.values())}"
    domain = alt.ExprRef(expr=f"[-0.5, (fold ? {folded_width} : {width}) - 0.5]")
    x = alt.X("x:Q", title="target position mod M (folded: mod S)", scale=alt.Scale(domain=domain, nice=False))
    x = x.axis(tickMinStep=1, format="d")
    y = alt.Y("accuracy:Q", title="accuracy (%)", scale=alt.Scale(domain=[-8, 100]))
    roles = alt.Scale(domain=["model", "full attention"], range=[vega.SELECTED, "#8a8a8a"])
    color = alt.Color("role:N", title=None, scale=roles)
    dash = alt.StrokeDash("dash:N", legend=None, scale=alt.Scale(domain=["solid", "dashed"], range=[[1, 0], [5, 3]]))
    folding = "fold && datum.stride"
    position = f"{folding} ? datum.residue % datum.stride : datum.residue"
    series = alt.Chart().transform_filter("datum.kind == 'series'")
    series = series.transform_calculate(x=position, period=f"{folding} ? floor(datum.residue / datum.stride) : 0")
    series = series.transform_calculate(dash="datum.role == 'full attention' || datum.period > 0 ? 'dashed' : 'solid'")
    lines = ["model:N", "period:Q"]
    band = series.mark_area(opacity=0.15).encode(x=x, y="low:Q", y2="high:Q", color=color, detail=lines)
    tooltip = ["model:N", "residue:Q", "accuracy:Q", "low:Q", "high:Q"]
    line = series.mark_line(point=alt.OverlayMarkDef(size=18)).encode(
        x=x, y=y, color=color, strokeDash=dash, detail=lines, tooltip=tooltip
    )
    boundary = alt.Chart().transform_filter(f"datum.kind == 'boundary' && !({folding})")
    boundary = boundary.transform_calculate(x="datum.residue - 0.5").mark_rule(color="#555", strokeDash=[4, 4])
    phase = alt.Chart().transform_filter("datum.kind == 'boundary phase'")
    phase = phase.transform_calculate(x=position, accuracy="-5")
    phase = phase.mark_point(shape="triangle-down", filled=True, color="#444", size=50)
    chart = alt.layer(band, line, boundary.encode(x=x), phase.encode(x=x, y=y)).properties(width=280, height=200)
    facet = alt.Facet("title:N", title=None, sort=alt.SortField("order"))
    chart = chart.facet(facet=facet, columns=3, data=vega.values(_rows(data)))
    chart = chart.transform_filter("model == 'all' || datum.panel == model").add_params(model, fold)
    return vega.finish(chart.properties(title=TITLE, description=DESCRIPTION))


TITLE = "Accuracy by residue with 95% bands; dashed rules: period boundaries, triangles: boundary phase S-1"
DESCRIPTION = "Accuracy by residue with 95% bands, one panel per compressed model, full attention dashed behind it"


def png(data: dict, inputs: Inputs, out_dir: Path) -> list[Path]:
    """The residue figure and, beside it, accuracy by absolute position."""
    paths = [vega.write_png(spec(data), out_dir / "residues.png")]
    if any(s["positions"] is not None for s in data["series"]):
        paths.append(vega.write_png(positions.spec(data["series"], panel_names(data)), out_dir / "positions.png"))
    return paths
