"""The gate plane (the paper's Figure 4): static vs per-window effective number of each key gate,
with training trajectories replayed by a step slider, and the gates' phase shares."""

from __future__ import annotations

from pathlib import Path

import altair as alt

from phasekv.charts import vega
from phasekv.charts.inputs import Inputs
from phasekv.charts.labels import head_label, model_name, num
from phasekv.charts.vega import figure_html

TRACED = 3  # the report traces the most statically concentrated heads at the end of training


def _heads(rows: list[dict]) -> list[dict]:
    """Every KV head's key gate in the plane; vector gates (measured per channel, averaged) flagged."""
    return [
        {
            "label": head_label(r),
            "layer": r["layer"],
            "x": num(r["static_offsets"], 3),
            "y": num(r["per_window_offsets"], 3),
            "vector": bool(r.get("per_channel_mean")),
        }
        for r in rows
        if r["branch"] == "key"
    ]


def plane_block(rows: list[dict], name: str) -> dict:
    """A gate result (`phasekv gates`) as the figure's data: its heads in the plane and the phase
    shares of its key and (shifted back by one) value gates."""
    shares = [
        {"label": head_label(r), "order": order, "branch": r["branch"], "phase": phase, "share": num(share, 3)}
        for order, r in enumerate(rows)
        for phase, share in enumerate(r["phase_share"])
    ]
    window = max(r["window"] for r in rows if r["branch"] == "key")
    return {
        "name": name,
        "window": window,
        "steps": None,
        "heads": [{**h, "index": 0} for h in _heads(rows)],
        "shares": shares,
    }


def trajectory_block(trajectory: dict, name: str, traced: int | None = TRACED) -> dict | None:
    """A training run's gate snapshots as the figure's data: every head at every step, the `traced`
    most statically concentrated heads at the last step (all with None) flagged for their paths."""
    steps = [s for s in trajectory["steps"] if s["rows"] and _heads(s["rows"])]
    if not steps:
        return None
    heads = [{**h, "index": i} for i, s in enumerate(steps) for h in _heads(s["rows"])]
    final = [h for h in heads if h["index"] == len(steps) - 1]
    concentrated = sorted(final, key=lambda h: h["x"] if h["x"] is not None else float("inf"))
    paths = {h["label"] for h in concentrated[:traced]}
    return {
        "name": f"{name} (training to step {steps[-1]['step']})",
        "window": max(r["window"] for r in steps[0]["rows"] if r["branch"] == "key"),
        "steps": [s["step"] for s in steps],
        "heads": [{**h, "traced": h["label"] in paths} for h in heads],
        "shares": [],
        "source": trajectory.get("source", ""),
    }


def section(inputs: Inputs) -> dict | None:
    planes = [plane_block(g.data["rows"], model_name(g.data, g.name)) for g in inputs.of("gates") if g.data["rows"]]
    for t in inputs.of("gate_trajectory"):
        block = trajectory_block(t.data, model_name(t.data, t.name))
        if block is not None:
            planes.append(block)
    planes = [p for p in planes if p["heads"]]
    return {"planes": planes} if planes else None


def spec(plane: dict) -> dict:
    """The plane of one gate result or training run: each KV head's key gate at (static, per-window)
    effective number of offsets, both from 1 to W, coloured by layer, vector gates as diamonds, the
    dashed diagonal where a gate scores each offset the same in every window. A training run gets a
    `step` param (a slider: Vega-Lite has no timer, so the replay is dragged, not played): the heads
    at that step and the traced heads' paths from the first step (open circle) to it (filled). A gate
    result gets its phase shares beside the plane (key, and value shifted back by one)."""
    window, steps = plane["window"], plane["steps"]
    replay = bool(steps) and len(steps) > 1
    rows = [{"kind": "head", **h} for h in plane["heads"]]
    rows += [{"kind": "diagonal", "x": 1, "y": 1}, {"kind": "diagonal", "x": window, "y": window}]
    rows += [{"kind": "share", **s} for s in plane["shares"]]
    if replay:
        rows += [{"kind": "step", "index": i, "text": f"step {s}"} for i, s in enumerate(steps)]
    at_step = "datum.index == step" if replay else "true"
    scale = alt.Scale(domain=[0.9, window + 0.1], nice=False)
    x = alt.X("x:Q", title="static exp(H(E[α]))", scale=scale)
    y = alt.Y("y:Q", title="per window E[exp(H(α))]", scale=scale)
    layer = alt.Color("layer:O", title="layer", scale=alt.Scale(scheme="viridis"))
    shape = alt.condition("datum.vector", alt.value("diamond"), alt.value("circle"))
    tooltip = ["label:N", "layer:O", alt.Tooltip("x:Q", title="static"), alt.Tooltip("y:Q", title="per window")]
    diagonal = alt.Chart().transform_filter("datum.kind == 'diagonal'").mark_line(color="#777", strokeDash=[5, 4])
    heads = alt.Chart().transform_filter(f"datum.kind == 'head' && {at_step}").mark_point(filled=True, size=60)
    heads = heads.encode(x=x, y=y, color=layer, shape=shape, opacity=alt.value(0.6 if replay else 0.9), tooltip=tooltip)
    layers = [diagonal.encode(x=x, y=y), heads]
    params = []
    if replay:
        bind = alt.binding_range(min=0, max=len(steps) - 1, step=1, name="training step (snapshot) ")
        params.append(alt.param(name="step", value=len(steps) - 1, bind=bind))
        traced = alt.Chart().transform_filter("datum.kind == 'head' && datum.traced")
        paths = traced.transform_filter("datum.index <= step").mark_line(color="#333", strokeWidth=1.4)
        start = traced.transform_filter("datum.index == 0").mark_point(color="#333", size=40, filled=False)
        now = traced.transform_filter("datum.index == step")
        label_text = now.mark_text(align="left", dx=7, dy=-6, fontSize=10).encode(x=x, y=y, text="label:N")
        step_text = alt.Chart().transform_filter("datum.kind == 'step' && datum.index == step")
        step_text = step_text.mark_text(align="left", fontSize=12).encode(
            x=alt.value(8), y=alt.value(10), text="text:N"
        )
        layers += [
            paths.encode(x=x, y=y, detail="label:N", order="index:Q"),
            start.encode(x=x, y=y),
            now.mark_point(color="#333", size=50, filled=True).encode(x=x, y=y, tooltip=tooltip),
            label_text,
            step_text,
        ]
    chart = alt.layer(*layers).properties(width=300, height=300)  # beside two share maps within the column
    branches = sorted({s["branch"] for s in plane["shares"]})
    if branches:
        chart = alt.hconcat(chart, *(_shares(branch) for branch in branches))
    title = f"Gate plane of {plane['name']}"
    chart = chart.properties(data=vega.values(rows), title=title, description=title + ": key gates by effective number")
    return vega.finish(chart.add_params(*params) if params else chart)


def _shares(branch: str) -> alt.Chart:
    """Heatmap of the gates' phase shares relative to uniform (rows: layer/head, columns: phase)."""
    title = "key gate: phase share / uniform" if branch == "key" else "value gate, shifted back by one"
    cells = alt.Chart().transform_filter(f"datum.kind == 'share' && datum.branch == '{branch}'").mark_rect()
    cells = cells.encode(
        x=alt.X("phase:O", title="phase", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("label:N", title=None, sort=alt.SortField("order")),
        color=alt.Color("share:Q", title="share / uniform", scale=alt.Scale(scheme="magma", domainMin=0)),
        tooltip=["label:N", "phase:O", "share:Q"],
    )
    return cells.properties(width=alt.Step(14), height=alt.Step(10), title=title)


def png(data: dict, inputs: Inputs, out_dir: Path) -> list[Path]:
    return vega.write_pngs(map(spec, data["planes"]), out_dir, "gate_plane")


def section_html(d: dict) -> str:
    figures = "".join(
        f"""<figure>{figure_html("fig-gates" + (f"-{i}" if i else ""), spec(plane))}</figure>"""
        for i, plane in enumerate(d["planes"])
    )
    return f"""
<section id="sec-gates"><h2>Gate plane</h2>{figures}
<p class="small">Each point is one KV head's key gate, placed by its static effective number of offsets exp(H(E[α]))
(horizontal) and its per-window effective number E[exp(H(α))] (vertical), both from 1 (one offset) to W (uniform);
color marks layer depth, diamonds mark vector gates (measured per channel, averaged). On the dashed diagonal a gate
gives each offset the same score in every window. Beside a gate result, its gates' phase shares relative to uniform
(the value gate shifted back by one). For a training run the points are the heads at the chosen snapshot and the lines
trace the most statically concentrated heads from the first snapshot (open circle) to it (filled): drag the step
slider to replay training (the figures are Vega-Lite, which has no timer, so there is no play button).</p></section>"""


def plot_gates(rows: list[dict], path: str | Path) -> Path:
    """The report's gate plane figure (`gates.spec`) of one gate result's rows, as PNG: every KV head's
    key gate in the (static, per-window) plane, and the key and value gates' phase shares."""
    return vega.write_png(spec(plane_block(rows, Path(path).stem)), path)


def plot_gate_trajectory(trajectory: dict, path: str | Path) -> Path:
    """The report's gate plane figure of a training run, as PNG, every head traced from the first step
    (open circle) to the last (filled)."""
    block = trajectory_block(trajectory, model_name(trajectory, Path(path).stem), traced=None)
    if block is None:
        raise ValueError("the gate trajectory has no key gates to plot")
    return vega.write_png(spec(block), path)
