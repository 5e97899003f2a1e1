"""The flip probe (the paper's Figure 1): candidate probabilities by filler length, the top strip."""

from __future__ import annotations

import html
from pathlib import Path

import altair as alt

from phasekv.charts import vega
from phasekv.charts.inputs import Inputs
from phasekv.charts.labels import num, nums
from phasekv.charts.vega import figure_html


def section(inputs: Inputs) -> dict | None:
    results = inputs.of("flip")
    if not results:
        return None
    return {"runs": [{**run_block(r.data, r.name), "file": r.path.as_posix()} for r in results]}


def run_block(data: dict, name: str) -> dict:
    """One flip result as the figure's data: per family the probabilities, the candidate on top and its
    pattern; the pooled pattern and its permutation p."""
    cands = [c["text"] if isinstance(c, dict) else str(c) for c in data["candidates"]]
    families = {}
    for fam, rec in data["families"].items():
        families[fam] = {
            "lengths": rec["lengths"],
            "probabilities": [nums(p, 6) for p in rec["probabilities"]],
            "top": rec["top"],
            "pattern": (rec.get("pattern") or {}).get("description", ""),
            "agree": (rec.get("pattern") or {}).get("agree"),
            "total": (rec.get("pattern") or {}).get("total"),
        }
    pooled, test = data["pattern"]["pooled"], data["pattern"].get("test") or {}
    return {
        "name": name,
        "candidates": cands,
        "period": data["period"]["value"],
        "period_source": data["period"].get("source", ""),
        "families": families,
        "pooled": pooled.get("description", ""),
        "agree": pooled.get("agree"),
        "total": pooled.get("total"),
        "p_value": num(test.get("permutation_p_value"), 4),
    }


def _rows(run: dict) -> list[dict]:
    """A row per (family, filler length, candidate) and per cycle boundary of the period P."""
    rows = []
    for order, (family, rec) in enumerate(run["families"].items()):
        where = {"family": family, "order": order}
        for length, probabilities, top in zip(rec["lengths"], rec["probabilities"], rec["top"], strict=True):
            for candidate, p in zip(run["candidates"], probabilities, strict=True):
                rows.append(
                    {**where, "kind": "p", "length": length, "candidate": candidate, "p": p, "top": top == candidate}
                )
        first = rec["lengths"][0]
        rows += [
            {**where, "kind": "cycle", "edge": n - 0.5} for n in rec["lengths"][1:] if (n - first) % run["period"] == 0
        ]
    return rows


def spec(run: dict) -> dict:
    """One flip run: per filler family, the probability of each candidate completion by filler length,
    a strip above it coloured by the candidate on top, and dashed rules between cycles of the period P.
    Param `family` ("all" or one family)."""
    families = list(run["families"])
    family = alt.param(name="family", value="all", bind=alt.binding_select(options=["all", *families], name="family "))
    candidates = alt.Scale(domain=run["candidates"], scheme="dark2")
    x = alt.X("length:Q", title="filler length L (tokens)", scale=alt.Scale(zero=False, nice=False, padding=12))
    x = x.axis(tickMinStep=1, format="d")
    tooltip = ["family:N", "length:Q", "candidate:N", alt.Tooltip("p:Q", format=".3g"), "top:N"]
    lines = (
        alt.Chart()
        .transform_filter("datum.kind == 'p'")
        .mark_line(point=True)
        .encode(
            x=x,
            y=alt.Y("p:Q", title="next-token probability"),
            color=alt.Color("candidate:N", title="candidate", scale=candidates),
            tooltip=tooltip,
        )
    )
    # the strip of the candidate on top, in pixels above the plot
    strip = (
        alt.Chart()
        .transform_filter("datum.kind == 'p' && datum.top")
        .mark_tick(thickness=10, size=16, orient="vertical")
        .encode(x=x, y=alt.value(-10), color=alt.Color("candidate:N", scale=candidates), tooltip=tooltip)
    )
    cycles = (
        alt.Chart()
        .transform_filter("datum.kind == 'cycle'")
        .mark_rule(color="#333", strokeDash=[3, 3])
        .encode(x="edge:Q")
    )
    chart = alt.layer(lines, strip, cycles).properties(width=620, height=170)
    header = alt.Header(labelFontSize=12, labelOrient="top", labelAngle=0, labelAnchor="start", labelPadding=22)
    facet = alt.Facet("family:N", title=None, sort=alt.SortField("order"), header=header)
    chart = chart.facet(row=facet, data=vega.values(_rows(run))).resolve_scale(y="independent")
    chart = chart.transform_filter("family == 'all' || datum.family == family").add_params(family)
    title = f"Flip probe ({run['name']}): candidate probabilities by filler length"
    title += f"; strip: the candidate on top; dashed: cycles of P={run['period']}"
    return vega.finish(chart.properties(title=title, description=title))


def png(data: dict, inputs: Inputs, out_dir: Path) -> list[Path]:
    return vega.write_pngs(map(spec, data["runs"]), out_dir, "flip")


def section_html(d: dict) -> str:
    return vega.runs_section("flip", "Flip probe", d["runs"], _flip_figure)


def _flip_figure(i: int, run: dict) -> str:
    def agreeing(rec: dict, unit: str) -> str:
        return f" ({rec['agree']} of {rec['total']} {unit} agree)" if rec["agree"] is not None else ""

    families = "".join(
        f"<li>{html.escape(family)}: {html.escape(rec['pattern'])}{agreeing(rec, 'lengths')}</li>"
        for family, rec in run["families"].items()
    )
    p_value = f" (permutation p = {run['p_value']})" if run["p_value"] is not None else ""
    return f"""
<figure>{figure_html("fig-flip" + (f"-{i}" if i else ""), spec(run))}
<figcaption>Probability of each candidate completion as the filler before an unchanged context grows one token
at a time; the strip above each plot shows which candidate is on top at each length, dashed lines separate cycles
of the period P = {run["period"]} (from {html.escape(run["period_source"])}). Choose a filler family to see it alone.
<ul class="small">{families}<li>pooled over families: {html.escape(run["pooled"])}, {run["agree"]} of {run["total"]}
rankings follow it{p_value}</li></ul></figcaption></figure>"""
