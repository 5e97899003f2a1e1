"""Phase conformance: the error of every execution mode by phase (position mod S), one heatmap per run."""

from __future__ import annotations

import html
from pathlib import Path

import altair as alt

from phasekv.charts import vega
from phasekv.charts.inputs import Inputs
from phasekv.charts.vega import figure_html
from phasekv.studies.conformance.options import VERDICTS

FLOOR = 1e-12  # errors are drawn on a log scale: exact agreement shows at this floor


def run_block(data: dict, name: str) -> dict:
    """One conformance result as the figure's data."""
    modes = []
    # not judged: no mode ran, and what the figure can show is the reference's disagreement with itself
    measured = {"reference repeat": data["reference_repeat"]} if data.get("conforms", False) is None else data["modes"]
    for mode, m in measured.items():
        modes.append(
            {
                "mode": mode,
                "conforms": m["conforms"],
                "first_failure": m["first_failure"],
                "text": m["concentration"]["text"],
                "phases": [
                    {
                        "phase": p["phase"],
                        "max": p["max_abs_delta"],
                        "mean": p["mean_abs_delta"],
                        "kl": p["max_kl"],
                        "top1": p["top1_agreement"],
                        "bad": p["beyond_tolerance"],
                    }
                    for p in m["by_phase"]
                ],
            }
        )
    return {
        "name": data.get("label") or name,
        "stride": data["stride"]["value"],
        "tolerance": data["tolerance"],
        "conforms": data["conforms"],
        "not_judged": data.get("not_judged"),
        "modes": modes,
        "undefined": data.get("undefined_modes") or {},
        # one attention layer's outputs (largest channel difference) instead of next-token log-probs
        "quantity": "output" if data.get("compared") == "layer output" else "log-prob",
    }


def section(inputs: Inputs) -> dict | None:
    results = inputs.of("conformance")
    if not results:
        return None
    return {"runs": [{**run_block(r.data, r.name), "file": r.path.as_posix()} for r in results]}


def _rows(run: dict) -> list[dict]:
    rows = []
    for order, m in enumerate(run["modes"]):
        for p in m["phases"]:
            value = p["max"]
            rows.append(
                {
                    "mode": m["mode"],
                    "order": order,
                    "phase": p["phase"],
                    "error": None if value is None else max(value, FLOOR),
                    "mean": p["mean"],
                    "kl": p["kl"],
                    "top1": p["top1"],
                    "bad": p["bad"],
                    "verdict": "ok" if m["conforms"] else "fails",
                }
            )
    return rows


def spec(run: dict) -> dict:
    """Heatmap: rows are execution modes, columns phases t mod S, colour the largest |delta log-prob| of
    the actual next token against the reference's parallel forward (log scale; cells beyond the tolerance
    outlined)."""
    y = alt.Y("mode:N", title=None, sort=alt.SortField("order"))
    x = alt.X("phase:O", title=f"phase: position mod {run['stride']}", axis=alt.Axis(labelAngle=0))
    colour = alt.Color(
        "error:Q",
        title=f"max |Δ {run.get('quantity', 'log-prob')}|",
        scale=alt.Scale(type="log", scheme="orangered", domain=[FLOOR, 1]),
        legend=alt.Legend(format=".0e"),
    )
    tooltip = [
        "mode:N",
        "phase:O",
        alt.Tooltip("error:Q", format=".2e", title=f"max |Δ {run.get('quantity', 'log-prob')}|"),
        alt.Tooltip("mean:Q", format=".2e", title=f"mean |Δ {run.get('quantity', 'log-prob')}|"),
        alt.Tooltip("kl:Q", format=".2e", title="max KL"),
        alt.Tooltip("top1:Q", format=".3f", title="top-1 agreement"),
        alt.Tooltip("bad:Q", title="positions beyond tolerance"),
    ]
    cells = (
        alt.Chart()
        .mark_rect(invalid=None)
        .encode(
            x=x,
            y=y,
            color=colour,
            stroke=alt.condition("datum.bad > 0", alt.value("#111"), alt.value(None)),
            strokeWidth=alt.condition("datum.bad > 0", alt.value(1.5), alt.value(0)),
            tooltip=tooltip,
        )
    )
    verdict = VERDICTS[run["conforms"]]
    title = f"Conformance of {run['name']} by phase and mode ({verdict} at tolerance {run['tolerance']:g})"
    chart = alt.layer(cells, data=vega.values(_rows(run))).properties(
        width=alt.Step(22), height=alt.Step(16), title=title, description=title
    )
    return vega.finish(chart)


def png(data: dict, inputs: Inputs, out_dir: Path) -> list[Path]:
    return vega.write_pngs(map(spec, data["runs"]), out_dir, "conformance")


def section_html(d: dict) -> str:
    return vega.runs_section("conformance", "Phase conformance", d["runs"], _figure)


def _figure(i: int, run: dict) -> str:
    failing = [m for m in run["modes"] if not m["conforms"]]
    items = "".join(f"<li>{html.escape(m['mode'])}: {html.escape(m['text'])}</li>" for m in failing)
    items += "".join(f"<li>{html.escape(mode)}: {html.escape(why)}</li>" for mode, why in run["undefined"].items())
    if run.get("not_judged"):
        items = f"<li>not judged: {html.escape(run['not_judged'])}</li>" + items
    listing = f'<ul class="small">{items}</ul>' if items else ""
    return f"""
<figure>{figure_html("fig-conformance" + (f"-{i}" if i else ""), spec(run))}
<figcaption>{html.escape(run["name"])}: each row runs the same prompts in one execution mode (parallel forward,
token-by-token decode, chunked prefill with its boundaries at phase o or in chunks of c tokens, padded batches, a
forked prefix cache) and compares every position's next-token log-prob with the reference's parallel forward;
columns group positions by phase (mod S = {run["stride"]}), colour is the largest difference (log scale), outlined
cells have positions beyond the tolerance {run["tolerance"]:g}.{listing}</figcaption></figure>"""


def plot_conformance(result: dict, path: str | Path) -> Path:
    """The report's conformance figure of one result, as PNG."""
    return vega.write_png(spec(run_block(result, Path(path).stem)), path)
