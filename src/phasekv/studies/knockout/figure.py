"""Knockout maps (the paper's Figure 3) and, per head, its gate preference by phase (Figure 5)."""

from __future__ import annotations

import html
import warnings
from pathlib import Path

import altair as alt

from phasekv.charts import vega
from phasekv.charts.inputs import Inputs, Result
from phasekv.charts.labels import head_label, model_name, nums
from phasekv.charts.vega import figure_html


def _run_dir(path) -> str | None:
    """The training run directory of a checkpoint path (`<run>/checkpoints/step_N`), resolved."""
    if not path:
        return None
    p = Path(path)
    return str((p.parent.parent if p.parent.name == "checkpoints" else p).resolve())


def _gate_sources(inputs: Inputs) -> list[tuple[dict | None, str | None, list[dict]]]:
    """(model config or None, model path or run dir, key/value gate rows) from gate results and the
    last step of trajectories."""
    sources = [
        ((g.data.get("model") or {}).get("config"), (g.data.get("model") or {}).get("path"), g.data["rows"])
        for g in inputs.of("gates")
    ]
    for t in inputs.of("gate_trajectory"):
        if t.data["steps"]:
            sources.append((None, t.data.get("run_dir"), t.data["steps"][-1]["rows"]))
    return sources


def _match_gates(knockout: Result, sources) -> tuple[dict, str]:
    """Gate rows by (layer, kv_head) for the knockout's model: same model config, else the only
    source with exactly its heads."""
    info = knockout.data.get("model") or {}
    config, run = info.get("config"), _run_dir(info.get("path"))
    heads = {(t["layer"], t["kv_head"]) for t in knockout.data["targets"]}
    same_run = [rows for _, path, rows in sources if run is not None and _run_dir(path) == run]
    exact = [rows for cfg, path, rows in sources if config is not None and cfg == config and path == info.get("path")]
    same_heads = [rows for _, _, rows in sources if {(r["layer"], r["kv_head"]) for r in rows} == heads]
    if exact:
        rows, how = exact[0], "same checkpoint"
    elif same_run:
        rows, how = same_run[0], "same training run"
    elif len(same_heads) == 1:
        rows, how = same_heads[0], "the only gate result with these heads"
    else:
        rows, how = None, ""
    if rows is None:
        return {}, ""
    table: dict = {}
    for r in rows:
        entry = table.setdefault(head_label(r), {"stride": r["stride"], "window": r["window"]})
        entry[r["branch"]] = nums(r["phase_share"], 3)
        if r["branch"] == "key":
            entry["key_static"] = round(float(r.get("static_phases", r["static_offsets"])), 3)
            entry["key_static_max"] = r["stride"] if "static_phases" in r else r["window"]
    return table, how


def map_block(data: dict, name: str, gates: dict | None = None, gates_from: str = "") -> dict:
    """One knockout result as the figure's data: relative changes by residue and folded by phase per
    target row, the clean accuracies, and (`gates`, by row label) the head's gate phase shares."""
    gates = gates or {}
    return {
        "name": name,
        "mode": data["mode"],
        "stride": data["stride"]["value"],
        "modulus": data["modulus"],
        "clean_phase": nums(data["clean"]["accuracy_by_phase"], 4, 100),
        "clean_residue": nums(data["clean"]["accuracy_by_residue"], 4, 100),
        "rows": [
            {
                "label": head_label(t),
                "phase": nums(t["relative_change_by_phase"], 2),
                "residue": nums(t["relative_change_by_residue"], 2),
                "phase_points": nums(t["change_by_phase"], 2, 100),
                "residue_points": nums(t["change_by_residue"], 2, 100),
                "gate": gates.get(head_label(t)),
            }
            for t in data["targets"]
        ],
        "gates_from": gates_from,
    }


def section(inputs: Inputs) -> dict | None:
    results = inputs.of("knockout")
    if not results:
        return None
    sources = _gate_sources(inputs)
    maps = []
    for r in results:
        gates, how = _match_gates(r, sources) if r.data["mode"] == "heads" else ({}, "")
        maps.append({**map_block(r.data, model_name(r.data, r.name), gates, how), "file": r.path.as_posix()})
    return {"maps": maps}


def _rows(m: dict) -> list[dict]:
    """A row per heatmap cell (by residue and folded by phase) and per gate phase share."""
    rows = []
    for order, row in enumerate(m["rows"]):
        where = {"label": row["label"], "order": order}
        for axis in ("residue", "phase"):
            clean = m[f"clean_{axis}"]
            for position, change in enumerate(row[axis]):
                points = row[f"{axis}_points"][position]
                rows.append({**where, "kind": axis, "position": position, "change": change, "points": points})
                rows[-1]["clean"] = clean[position]
        for branch, shares in (row["gate"] or {}).items():
            if branch in ("key", "value"):
                rows += [
                    {**where, "kind": "gate", "branch": branch, "phase": i, "share": v} for i, v in enumerate(shares)
                ]
    return rows


def spec(m: dict, interactive: bool = True) -> dict:
    """Knockout map of one result: heatmaps of the relative accuracy change by residue and folded by
    the stride S (rows: knocked-out heads or layers; red lost, blue gained, clipped at +-100%, gray
    where clean accuracy is 0); below, the selected row's change at every phase (a phase at clean accuracy 0
    marked as such) and, with gate results, that head's gate preference by phase. Params: `row` (click a row; the
    first to start) and, with value gates, `branch` (key or value gate). `interactive=False` (the PNG): no
    selection, the first row's change drawn and named, nothing to click."""
    with warnings.catch_warnings():  # altair merges the row selection both heatmaps hold into one, as meant
        warnings.filterwarnings("ignore", "Automatically deduplicated selection parameter", UserWarning)
        return vega.finish(_chart(m, interactive))


CLEAN_ZERO = "clean 0"  # a phase whose clean accuracy is 0 has no relative change
CELL_WIDTH, CELL_HEIGHT = 30, 22  # heatmap cells large enough to read a row of 8 phases at a glance


def _cell_height(n_rows: int) -> int:
    """Rows stay readable for a few targets and the map stays on a screen or two for a whole model's heads."""
    return CELL_HEIGHT if n_rows <= 24 else max(12, CELL_HEIGHT * 24 // n_rows)


def _chart(m: dict, interactive: bool) -> alt.VConcatChart:
    rows = _rows(m)
    first = m["rows"][0]["label"]
    row = alt.selection_point(
        name="row", fields=["label"], value=[{"label": first}], toggle=False, clear=False, empty=False
    )
    # the PNG cannot be clicked: it shows the first row, the page's starting selection
    selected = row if interactive else alt.datum.label == first
    y = alt.Y("label:N", title=None, sort=alt.SortField("order"), axis=alt.Axis(grid=False))
    change = alt.Color(
        "change:Q",
        title="relative change (%)",
        scale=alt.Scale(scheme="redblue", domain=[-100, 100], clamp=True),
        legend=alt.Legend(gradientLength=140),
    )
    color = alt.condition("datum.change === null", alt.value("#e6e6e6"), change)
    tooltip = ["label:N", "position:O", "change:Q", alt.Tooltip("points:Q", title="change (points)"), "clean:Q"]
    height = _cell_height(len(m["rows"]))

    def heatmap(axis: str, title: str) -> alt.Chart:
        # invalid=None: cells without a relative change (clean accuracy 0) are drawn gray, not dropped
        x = alt.X("position:O", title=title, axis=alt.Axis(labelAngle=0, grid=False))  # no grid across the cells
        stroke = alt.condition(selected, alt.value(1.5), alt.value(0))
        cells = alt.Chart().transform_filter(f"datum.kind == '{axis}'").mark_rect(stroke="#111", invalid=None)
        cells = cells.encode(x=x, y=y, color=color, strokeWidth=stroke, tooltip=tooltip)
        cells = cells.properties(width=alt.Step(CELL_WIDTH), height=alt.Step(height))
        return cells.add_params(row) if interactive else cells

    maps = alt.hconcat(
        heatmap("residue", f"t_K mod {m['modulus']}"), heatmap("phase", f"folded: t_K mod {m['stride']}")
    )
    phases = alt.X(
        "position:O",
        title=f"position mod {m['stride']}",
        scale=alt.Scale(domain=list(range(m["stride"]))),  # every phase, those without a bar too
        axis=alt.Axis(labelAngle=0),
    )
    change_y = alt.Y("change:Q", title="relative change (%)", scale=alt.Scale(domain=[-100, 100], clamp=True))
    detail = alt.Chart().transform_filter(selected).transform_filter("datum.kind == 'phase'")
    sign = alt.condition("datum.change < 0", alt.value("#b2182b"), alt.value("#2166ac"))
    bars = detail.transform_filter("datum.change !== null").mark_bar()
    bars = bars.encode(x=phases, y=change_y, color=sign, tooltip=tooltip)
    # a phase at clean accuracy 0 (no relative change): a gray column labelled as such, where a bar would be
    zero = detail.transform_filter("datum.change === null").transform_calculate(low="-100", high="100")
    zero_band = zero.mark_bar(color="#e6e6e6").encode(x=phases, y=alt.Y("low:Q"), y2="high:Q", tooltip=tooltip)
    zero_text = zero.transform_calculate(text=f"'{CLEAN_ZERO}'").mark_text(angle=270, fontSize=10, color="#555")
    zero_text = zero_text.encode(x=phases, y=alt.datum(0), text="text:N")
    detail_title = "the selected row's change by phase" if interactive else f"{first}'s change by phase"
    below = [alt.layer(zero_band, bars, zero_text).properties(width=260, height=160, title=detail_title)]
    branches = sorted({r["branch"] for r in rows if r["kind"] == "gate"})
    params = []
    if branches:
        branch = alt.param(name="branch", value="key", bind=alt.binding_select(options=branches, name="gate "))
        params.append(branch)
        gate = alt.Chart().transform_filter(selected).transform_filter("datum.kind == 'gate' && datum.branch == branch")
        bars = gate.mark_bar(color="#7570b3").encode(
            x=alt.X("phase:O", title="phase (value gate: shifted back by one)", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("share:Q", title="gate score / uniform share"),
            tooltip=["label:N", "branch:N", "phase:O", "share:Q"],
        )
        uniform = alt.Chart().mark_rule(strokeDash=[3, 3], color="#888").encode(y=alt.datum(1))
        below.append(alt.layer(bars, uniform).properties(width=220, height=160, title="its gate preference by phase"))
    title = f"Knockout map ({m['mode']}) of {m['name']}: accuracy change relative to clean"
    chart = alt.vconcat(maps, alt.hconcat(*below), data=vega.values(rows)).add_params(*params)
    return chart.properties(title=title + ("; click a row" if interactive else ""), description=title)


def png(data: dict, inputs: Inputs, out_dir: Path) -> list[Path]:
    return vega.write_pngs([spec(m, interactive=False) for m in data["maps"]], out_dir, "knockout")


def section_html(d: dict) -> str:
    figures = "".join(_knockout_figure(i, m) for i, m in enumerate(d["maps"]))
    return f"""
<section id="sec-knockout"><h2>Knockout map and gate preferences</h2>{figures}</section>"""


def _knockout_figure(i: int, m: dict) -> str:
    if any(row["gate"] for row in m["rows"]):
        gates = f"""; beside it, the same head's mean gate score by phase relative to a uniform share (dashed = 1×,
gate results matched by {html.escape(m["gates_from"])}; “gate” switches to the value gate, shifted back by one)"""
    else:
        gates = (
            " (no gate result for this model: run `phasekv gates` on it to see its gate preferences"
            " beside the knockouts)"
        )
    return f"""
<figure>{figure_html("fig-knockout" + (f"-{i}" if i else ""), spec(m))}
<figcaption>{html.escape(m["name"])}: each row knocks out one KV head (or a whole layer) by mean replacement at the
final position; columns are target positions by residue (left) and folded by the stride S (right); color is the
accuracy change relative to clean: red lost, blue gained, clipped at ±100% (gray: clean accuracy 0, no relative
change). Click a row to see its change at every phase below (a gray column marks a phase at clean accuracy 0){gates}.
</figcaption></figure>"""


def plot_knockout(result: dict, path: str | Path) -> Path:
    """The report's knockout figure (`knockout.spec`) of one knockout result, as PNG."""
    return vega.write_png(spec(map_block(result, model_name(result, Path(path).stem)), interactive=False), path)
