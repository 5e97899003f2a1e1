"""Gate cycling (the paper's Figure 6): observed vs predicted accuracy by phase, scatter, R^2 by delta."""

from __future__ import annotations

import html
from pathlib import Path

import altair as alt

from phasekv.charts import vega
from phasekv.charts.inputs import Inputs
from phasekv.charts.labels import model_name, num, nums
from phasekv.charts.vega import figure_html


def model_block(data: dict, name: str) -> dict:
    """One cycling result as the figure's data (accuracies and changes in percent)."""
    return {
        "name": name,
        "stride": data["stride"],
        "boundary": data["boundary_phase"],
        "base": nums(data["base"]["accuracy_by_phase"], 3, 100),
        "base_band": [nums(b, 3, 100) for b in data["base"]["band"]],
        "cycles": [
            {
                "delta": c["delta"],
                "accuracy": nums(c["accuracy_by_phase"], 3, 100),
                "band": [nums(b, 3, 100) for b in c["band"]],
                "observed": nums(c["observed_change"], 3, 100),
                "predicted": nums(c["predicted_change"], 3, 100),
                "r2": num(c["r2"], 3),
                "r2_interval": nums(c["r2_interval"], 3) if c.get("r2_interval") else None,
            }
            for c in data["cycles"]
        ],
    }


def section(inputs: Inputs) -> dict | None:
    results = inputs.of("cycle")
    if not results:
        return None
    models = [{**model_block(r.data, model_name(r.data, r.name)), "file": r.path.as_posix()} for r in results]
    deltas = sorted({c["delta"] for m in models for c in m["cycles"]})
    return {"models": models, "deltas": deltas}


def _rows(m: dict) -> list[dict]:
    """Rows of the uncycled model by phase, of each delta by phase (with the prediction
    A0((r - delta) mod S)), of each delta's R^2, and of the boundary phase."""
    stride, base = m["stride"], m["base"]
    rows = [
        {"kind": "base", "phase": r, "accuracy": base[r], "low": lo, "high": hi}
        for r, (lo, hi) in enumerate(m["base_band"])
    ]
    for c in m["cycles"]:
        d = c["delta"]
        for r in range(stride):
            rows.append(
                {
                    "kind": "cycle",
                    "delta": d,
                    "phase": r,
                    "accuracy": c["accuracy"][r],
                    "low": c["band"][r][0],
                    "high": c["band"][r][1],
                    "prediction": base[(r - d) % stride],
                    "observed": c["observed"][r],
                    "predicted": c["predicted"][r],
                    "boundary": r == m["boundary"],
                }
            )
        low, high = c["r2_interval"] or (None, None)
        r2 = "n/a" if c["r2"] is None else f"{c['r2']:.2f}" + (f" [{low:.2f}, {high:.2f}]" if low is not None else "")
        rows.append({"kind": "r2", "delta": d, "r2": c["r2"], "r2_low": low, "r2_high": high, "text": f"R² {r2}"})
    return [*rows, {"kind": "boundary", "phase": m["boundary"], "accuracy": -5}]


def spec(m: dict) -> dict:
    """One cycled model: accuracy by phase after cycling the gates by delta (red, 95% band) against
    the uncycled model (gray) and the prediction A0((r - delta) mod S) (dashed), the boundary phase
    marked; predicted against observed change per phase (the boundary phase hollow, excluded from
    R^2); R^2 with its 95% interval for every delta. Param `delta` (the model's deltas)."""
    deltas = [c["delta"] for c in m["cycles"]]
    start = next((d for d in deltas if d != 0), deltas[0])
    labels = [f"{d:+d}" for d in deltas]
    delta = alt.param(name="delta", value=start, bind=alt.binding_radio(options=deltas, labels=labels, name="δ "))
    rows = _rows(m)
    stride = m["stride"]
    phase = alt.X("phase:Q", title=f"phase (position mod {stride})", scale=alt.Scale(domain=[-0.5, stride - 0.5]))
    phase = phase.axis(tickMinStep=1, format="d")
    percent = alt.Scale(domain=[-8, 100])
    accuracy = alt.Y("accuracy:Q", title="accuracy (%)", scale=percent)
    band = alt.Y("low:Q", title="accuracy (%)", scale=percent)
    chosen = "datum.kind == 'cycle' && datum.delta == delta"
    base = alt.Chart().transform_filter("datum.kind == 'base'")
    cycled = alt.Chart().transform_filter(chosen)
    tooltip = ["phase:Q", "accuracy:Q", "low:Q", "high:Q"]
    by_phase = alt.layer(
        base.mark_area(color="#888", opacity=0.15).encode(x=phase, y=band, y2="high:Q"),
        base.mark_line(color="#999", point=alt.OverlayMarkDef(color="#999")).encode(
            x=phase, y=accuracy, tooltip=tooltip
        ),
        cycled.mark_area(color=vega.SELECTED, opacity=0.15).encode(x=phase, y=band, y2="high:Q"),
        cycled.mark_line(color=vega.SELECTED, strokeWidth=2.4, point=alt.OverlayMarkDef(color=vega.SELECTED)).encode(
            x=phase, y=accuracy, tooltip=tooltip
        ),
        cycled.mark_line(color=vega.SELECTED, strokeDash=[5, 4]).encode(
            x=phase, y=alt.Y("prediction:Q", title="accuracy (%)", scale=percent)
        ),
        alt.Chart()
        .transform_filter("datum.kind == 'boundary'")
        .mark_point(shape="triangle-down", filled=True, color="#444", size=60)
        .encode(x=phase, y=accuracy),
    ).properties(
        width=330, height=240, title=_panel("accuracy by phase: observed (red), uncycled (gray), predicted (dashed)")
    )
    changes = [abs(v) for c in m["cycles"] for v in c["observed"] + c["predicted"] if v is not None]
    lim = round(max([5.0, *changes]) * 1.1, 1)
    change = alt.Scale(domain=[-lim, lim], nice=False)
    scatter = alt.layer(
        alt.Chart()
        .mark_rule(color="#888", strokeDash=[4, 4])
        .encode(x=alt.datum(-lim), y=alt.datum(-lim), x2=alt.datum(lim), y2=alt.datum(lim)),
        cycled.mark_point(color=vega.SELECTED, size=60).encode(
            x=alt.X("predicted:Q", title="predicted change (pp)", scale=change),
            y=alt.Y("observed:Q", title="observed change (pp)", scale=change),
            fill=alt.condition("datum.boundary", alt.value("white"), alt.value(vega.SELECTED)),
            tooltip=["phase:Q", "predicted:Q", "observed:Q", "boundary:N"],
        ),
        alt.Chart()
        .transform_filter("datum.kind == 'r2' && datum.delta == delta")
        .mark_text(align="left", fontSize=12)
        .encode(x=alt.value(6), y=alt.value(10), text="text:N"),
    ).properties(width=240, height=240, title=_panel("predicted against observed change"))
    r2s = [v for c in m["cycles"] for v in (c["r2"], *(c["r2_interval"] or ())) if v is not None]
    r2_scale = alt.Scale(domain=[min([0.0, *r2s]) - 0.05, 1.05], nice=False)
    fits = alt.Chart().transform_filter("datum.kind == 'r2' && datum.r2 !== null")
    x_delta = alt.X("delta:O", title="δ", axis=alt.Axis(labelAngle=0))
    on = alt.condition("datum.delta == delta", alt.value(vega.SELECTED), alt.value("#555"))
    r2 = alt.layer(
        fits.mark_rule().encode(x=x_delta, y=alt.Y("r2_low:Q", scale=r2_scale), y2="r2_high:Q", color=on),
        fits.mark_point(filled=True, size=60).encode(
            x=x_delta,
            y=alt.Y("r2:Q", title="R² (boundary phase excluded)", scale=r2_scale),
            color=on,
            tooltip=["delta:O", "text:N"],
        ),
    ).properties(width=alt.Step(36), height=240, title=_panel("R² by δ, 95% CI"))
    title = f"Gate cycling of {m['name']}: the gate parameters cycled by δ"
    chart = alt.hconcat(by_phase, scatter, r2, data=vega.values(rows)).add_params(delta)
    return vega.finish(chart.properties(title=title, description=title))


def _panel(text: str) -> alt.TitleParams:
    return alt.TitleParams(text, fontWeight="normal", fontSize=12)


def png(data: dict, inputs: Inputs, out_dir: Path) -> list[Path]:
    return vega.write_pngs(map(spec, data["models"]), out_dir, "cycle")


def section_html(d: dict) -> str:
    figures = "".join(
        f"""<figure>{figure_html("fig-cycle" + (f"-{i}" if i else ""), spec(m), link="delta")}</figure>"""
        for i, m in enumerate(d["models"])
    )
    head = "".join(f"<th>{delta:+d}</th>" for delta in d["deltas"])
    body = "".join(
        f"<tr><td>{html.escape(m['name'])}</td>{''.join(_r2_cell(m, delta) for delta in d['deltas'])}</tr>"
        for m in d["models"]
    )
    return f"""
<section id="sec-cycle"><h2>Gate cycling</h2>{figures}
<p class="small">Observed accuracy after cycling the gate parameters by δ (red, 95% band), the uncycled model (gray),
and the prediction A₀((r−δ) mod S) (dashed); the triangle marks the boundary phase. Beside it, predicted against
observed change per phase (the boundary phase, hollow, is excluded from R²) and R² with its 95% interval for every δ.
Choose δ above a figure or click a cell of the grid below: every model's figure moves to that δ.</p>
<table class="data r2grid" id="cycle-grid"
aria-label="R squared over models and deltas: click a cell to show that delta">
<thead><tr><th>model \\ δ</th>{head}</tr></thead><tbody>{body}</tbody></table></section>"""


def _r2_cell(m: dict, delta: int) -> str:
    c = next((c for c in m["cycles"] if c["delta"] == delta), None)
    if c is None or c["r2"] is None:
        return "<td>–</td>"
    shade = f"rgba(31,95,168,{0.1 + 0.6 * max(0.0, c['r2']):.2f})"
    ci = f' title="95% CI [{c["r2_interval"][0]:.2f}, {c["r2_interval"][1]:.2f}]"' if c["r2_interval"] else ""
    return (
        f'<td class="cell" data-param="delta" data-value="{delta}" tabindex="0" style="background:{shade}"{ci}>'
        f"{c['r2']:.2f}</td>"
    )


def plot_cycle(result: dict, path: str | Path) -> Path:
    """The report's gate cycling figure (`cycle.spec`) of one cycling result, as PNG."""
    return vega.write_png(spec(model_block(result, model_name(result, Path(path).stem))), path)
