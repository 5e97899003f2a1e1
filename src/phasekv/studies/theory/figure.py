"""Theory: Theorem 2's concentration trajectories, the sweep's coverage table and Theorem 1's minimisers."""

from __future__ import annotations

import html
import json
from pathlib import Path

import altair as alt

from phasekv.charts import vega
from phasekv.charts.inputs import Inputs
from phasekv.charts.labels import fmt, num, nums
from phasekv.charts.vega import figure_html

# (sweep table key, column, scale): fractions and accuracies are shown in percent, as everywhere in the report
TABLE = [
    ("n_runs", "runs", 1),
    ("frac_concentrated", "concentrated (%)", 100),
    ("frac_full_coverage", "full coverage (%)", 100),
    ("mean_collisions", "collisions", 1),
    ("final_loss_mean", "final loss", 1),
    ("accuracy_mean", "accuracy (%)", 100),
    ("min_position_accuracy_mean", "worst position (%)", 100),
]


def run_block(result: dict, name: str, file: str = "") -> dict:
    """The figure's data of one Theorem 2 run (`theory.theorem2.train_gates`' result)."""
    trajectory, final = result["trajectory"], result["final"]
    return {
        "name": name,
        "file": file,
        "S": result["params"]["chunk_size"],
        "m": result["params"]["n_heads"],
        "steps": trajectory["step"],
        "key_static": [nums(v, 3) for v in trajectory["key_static"]],
        "key_per_window": [nums(v, 3) for v in trajectory["key_per_window"]],
        "value_static": [nums(v, 3) for v in trajectory.get("value_static", [])],
        "selected": final["selected_positions"],
        "uncovered": final.get("uncovered_positions", []),
        "loss": num(final.get("loss"), 4),
    }


def section(inputs: Inputs) -> dict | None:
    runs = [run_block(r.data, r.name, r.path.as_posix()) for r in inputs.of("theorem2")]
    sweeps = []
    for r in inputs.of("sweep"):
        grid = list(r.data["grid"])
        shown = [(k, scale) for k, _, scale in TABLE]
        rows = [
            [row.get(k) for k in grid] + [None if row.get(k) is None else num(scale * row[k], 3) for k, scale in shown]
            for row in r.data["table"]
        ]
        sweeps.append(
            {
                "name": r.name,
                "file": r.path.as_posix(),
                "columns": grid + [t for _, t, _ in TABLE],
                "rows": rows,
                "seeds": r.data.get("seeds"),
            }
        )
    sweeps += [_theorem1_table(r) for r in inputs.of("theorem1")]
    if not runs and not sweeps:
        return None
    return {"runs": runs, "sweeps": sweeps}


THEOREM1_COLUMNS = ["N", "L", "S", "m", "starts", "one-hot, value after key", "of those distinct", "best loss"]


def _theorem1_table(result) -> dict:
    """Theorem 1 as a one-row table beside the sweeps: how many random starts end at one-hot rules
    with each value one position after its key, and on distinct positions."""
    p, s = result.data["params"], result.data["summary"]
    row = [p.get("n_tokens"), p.get("n_chunks"), p["chunk_size"], p["n_heads"], s["n_starts"]]
    row += [s.get("n_one_hot_value_after_key"), s.get("n_of_those_distinct"), num(s["best_loss"], 4)]
    return {
        "name": f"Theorem 1: free query-independent rules from random starts ({result.name})",
        "file": result.path.as_posix(),
        "columns": THEOREM1_COLUMNS,
        "rows": [row],
        "seeds": [p.get("seed")],
    }


def spec(run: dict) -> dict:
    """Theorem 2's gates trained from a small ball: per head, the static (solid) and per-window
    (dashed) effective number of positions of its key gate over training, from S (uniform) down to 1."""
    rows = [
        {"step": step, "head": f"head {h} → key {run['selected'][h]}", "measure": measure, "value": values[h]}
        for measure, key in (("static", "key_static"), ("per window", "key_per_window"))
        for step, values in zip(run["steps"], run[key], strict=True)
        for h in range(run["m"])
    ]
    lines = (
        alt.Chart(vega.values(rows))
        .mark_line(strokeWidth=2)
        .encode(
            x=alt.X("step:Q", title="training step"),
            y=alt.Y("value:Q", title="effective positions", scale=alt.Scale(domain=[1, run["S"]], nice=False)),
            color=alt.Color("head:N", title=None, scale=alt.Scale(scheme="dark2")),
            strokeDash=alt.StrokeDash(
                "measure:N", title=None, scale=alt.Scale(domain=["static", "per window"], range=[[1, 0], [5, 4]])
            ),
            tooltip=["head:N", "measure:N", "step:Q", "value:Q"],
        )
    )
    # the run's file is named in the caption: a path in a title crowds out what the figure shows
    title = f"Theorem 2: key gates concentrate over training (S={run['S']}, m={run['m']} heads)"
    return vega.finish(lines.properties(width=440, height=260, title=title, description=title))


def png(data: dict, inputs: Inputs, out_dir: Path) -> list[Path]:
    return vega.write_pngs(map(spec, data["runs"]), out_dir, "theory")


def section_html(d: dict) -> str:
    figures = "".join(
        f"""<figure>{figure_html("fig-theory" + (f"-{i}" if i else ""), spec(run))}
<figcaption>Log-linear gates of the idealized induction model trained from a small ball: per head, the static (solid)
and per-window (dashed) effective number of positions of its key gate, from S (uniform) down to 1 (one position).
Final loss {fmt(run["loss"], 4)}; key positions selected {run["selected"]}; uncovered non-final positions:
{run["uncovered"] or "none"}. Source: {html.escape(run["file"] or run["name"])}.</figcaption></figure>"""
        for i, run in enumerate(d["runs"])
    )
    tables = ""
    if d["sweeps"]:
        tables = """<p class="sub">Coverage over a sweep: the fraction of runs whose heads all concentrate, the fraction
whose concentrated heads cover all S−1 non-final positions, mean collisions, loss and accuracy.</p>"""
        tables += "".join(_sweep_table(sweep) for sweep in d["sweeps"])
    return f"""
<section id="sec-theory"><h2>Theory</h2>{figures}{tables}</section>"""


def _sweep_table(sweep: dict) -> str:
    def cell(value) -> str:
        return html.escape(f"{value:.4g}" if isinstance(value, float) else str(value))

    head = "".join(f"<th>{html.escape(c)}</th>" for c in sweep["columns"])
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in sweep["rows"])
    return f"""<p class="small">{html.escape(sweep["name"])} (seeds {json.dumps(sweep["seeds"])})</p>
<table class="data"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"""


def plot_theorem2(result: dict, path: str | Path) -> Path:
    """The report's Theorem 2 figure (`theory.spec`) of one `train_gates` result, as PNG."""
    return vega.write_png(spec(run_block(result, Path(path).stem)), path)
