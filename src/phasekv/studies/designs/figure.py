"""The design comparison (`phasekv reproduce --profile mitigations|designs`): a table, and mean vs gap per seed."""

from __future__ import annotations

import html
from pathlib import Path
from statistics import fmean

import altair as alt

from phasekv.charts import vega
from phasekv.charts.inputs import Inputs
from phasekv.charts.labels import num, nums
from phasekv.charts.vega import figure_html


def section(inputs: Inputs) -> dict | None:
    results = inputs.of("designs")
    if not results:
        return None
    data = results[-1].data
    rows = [
        {
            "design": d["design"],
            "role": "control" if d["control"] else "baseline" if d["baseline"] else "candidate",
            "seeds": d["seeds"],
            "cache_bytes_per_token": num(d["cache_bytes_per_token"], 2),
            "mean": nums(d["mean"], 2),
            "worst": nums(d["worst"], 2),
            "gap": nums(d["gap"], 2),
            "period_diff": nums(d["period_diff"], 2),
            "learned": d["learned"],
            "meets_target": d.get("meets_target"),
            "misses": d.get("misses", []),
            "mean_over_seeds": d.get("mean_over_seeds"),
            "gap_over_seeds": d.get("gap_over_seeds"),
        }
        for d in data["designs"]
    ]
    mechanism = {key: data.get(key) for key in ("knockout_run", "cycle_run", "cycle_note")}
    return {"file": results[-1].path.as_posix(), "rows": rows, "tests": data.get("tests", []), **mechanism}


ROLES = {"control": "square", "baseline": "diamond", "candidate": "circle"}


def spec(data: dict) -> dict:
    """Mean accuracy against the gap (best - worst residue) of every design, one point per seed (hollow:
    not learned, its small gap is flatness for the wrong reason) and a cross at the seed mean (the gap over the
    learned seeds; no cross when none learned); shape by
    role. Click a design in the legend to pick it out (a legend-bound selection)."""
    rows = []
    for row in data["rows"]:
        where = {"design": row["design"], "role": row["role"]}
        for seed, mean, gap, learned in zip(row["seeds"], row["mean"], row["gap"], row["learned"], strict=True):
            rows.append({**where, "kind": "seed", "seed": seed, "mean": mean, "gap": gap, "learned": learned})
        means = [v for v in row["mean"] if v is not None]
        # the gap of the learned seeds only, as in the table: a seed at chance is flat for the wrong reason
        gaps = [v for v, learned in zip(row["gap"], row["learned"], strict=True) if v is not None and learned]
        if means and gaps:
            rows.append({**where, "kind": "seed mean", "mean": round(fmean(means), 2), "gap": round(fmean(gaps), 2)})
    picked = alt.selection_point(name="design", fields=["design"], bind="legend")
    percent = alt.Scale(domain=[-3, 103], nice=False)
    x = alt.X("mean:Q", title="mean accuracy over residues (%)", scale=percent)
    y = alt.Y("gap:Q", title="gap: best - worst residue (points)", scale=percent)
    order = alt.Scale(domain=[row["design"] for row in data["rows"]], scheme="tableau10")  # the table's order
    color = alt.Color("design:N", title="design", scale=order)
    faded = alt.condition(picked, alt.value(1.0), alt.value(0.15))
    tooltip = ["design:N", "role:N", "seed:N", "mean:Q", "gap:Q", "learned:N"]
    seeds = alt.Chart().transform_filter("datum.kind == 'seed'").mark_point(size=70, strokeWidth=1.5, filled=True)
    seeds = seeds.encode(
        x=x,
        y=y,
        color=color,
        shape=alt.Shape("role:N", title="role", scale=alt.Scale(domain=list(ROLES), range=list(ROLES.values()))),
        stroke=alt.Stroke("design:N", scale=order),  # the outline that stays when hollow (one legend with color)
        fillOpacity=alt.condition("datum.learned", alt.value(1.0), alt.value(0.0)),
        opacity=faded,
        tooltip=tooltip,
    )
    means = alt.Chart().transform_filter("datum.kind == 'seed mean'").mark_point(shape="cross", size=160, filled=True)
    means = means.encode(x=x, y=y, color=color, opacity=faded, tooltip=["design:N", "kind:N", "mean:Q", "gap:Q"])
    chart = alt.layer(seeds.add_params(picked), means, data=vega.values(rows)).properties(width=420, height=340)
    title = "Designs at W8/S8's cache size: one point per seed (hollow: not learned), cross: seed mean"
    title += " (gap: learned seeds)"
    return vega.finish(chart.properties(title=title, description=title + "; lower right is better"))


def png(data: dict, inputs: Inputs, out_dir: Path) -> list[Path]:
    return [vega.write_png(spec(data), out_dir / "designs.png")]


def conclusion(rows: list[dict]) -> str:
    """One sentence: which candidate designs met the target, or that none did and how many learned at all."""
    candidates = [r for r in rows if r["role"] == "candidate"]
    met = [r["design"] for r in candidates if r["meets_target"]]
    if met:
        return f"{len(met)} of {len(candidates)} candidate designs met the target: {', '.join(met)}."
    unlearned = [r["design"] for r in candidates if not any(r["learned"])]
    tail = f"; no seed of {', '.join(unlearned)} learned" if unlearned else ""
    return f"No candidate design met the target ({len(candidates)} tried{tail})."


def section_html(d: dict) -> str:
    def seeds(values) -> str:
        return " / ".join("-" if v is None else f"{v:.1f}" for v in values)

    def verdict(row) -> str:
        if row["role"] != "candidate":
            return row["role"]
        return "target met" if row["meets_target"] else "missed: " + "; ".join(row["misses"])

    def over_seeds(summary) -> str:
        if not summary:
            return "-"
        ci = summary["ci"]
        return f"{summary['mean']:.1f}" + (f" [{ci[0]:.1f}, {ci[1]:.1f}]" if ci else "")

    body = "".join(
        f"<tr><td>{html.escape(r['design'])}</td><td>{' / '.join(map(str, r['seeds']))}</td>"
        f"<td>{r['cache_bytes_per_token']:g}</td><td>{seeds(r['mean'])}</td><td>{over_seeds(r['mean_over_seeds'])}</td>"
        f"<td>{seeds(r['worst'])}</td><td>{seeds(r['gap'])}</td><td>{over_seeds(r['gap_over_seeds'])}</td>"
        f"<td>{seeds(r['period_diff'])}</td><td class='text'>{html.escape(verdict(r))}</td></tr>"
        for r in d["rows"]
    )

    def test_row(t) -> str:
        if not t.get("testable", True):
            return (
                f"<tr><td>{html.escape(t['claim'])}</td><td>-</td><td>not testable: {t['n'][0]} + {t['n'][1]} "
                "learned seeds</td><td>-</td><td>-</td></tr>"
            )
        return (
            f"<tr><td>{html.escape(t['claim'])}</td><td>{t['difference']:+.1f}"
            + (f" [{t['difference_ci'][0]:.1f}, {t['difference_ci'][1]:.1f}]" if t["difference_ci"] else "")
            + f"</td><td>{t['permutation_p']:.3g} (of {t['permutation_splits']})</td>"
            f"<td>{'-' if t['welch_p'] is None else format(t['welch_p'], '.3g')}</td>"
            f"<td>{'-' if t['hedges_g'] is None else format(t['hedges_g'], '.2f')}</td></tr>"
        )

    tests = "".join(test_row(t) for t in d.get("tests", []))
    if tests:
        tests = f"""<table class="data" id="designs-tests"><thead><tr><th>claim (gap, across seeds)</th>
<th>difference (Welch 95% CI)</th><th>p (exact permutation, of splits)</th><th>p (Welch)</th><th>Hedges' g</th></tr>
</thead><tbody>{tests}</tbody></table>
<p class="sub">One-sided tests on the learned seeds' gaps, seeds as units; the exact permutation test is the test
of record (its smallest possible p is 1 / the number of splits).</p>"""
    knocked = d.get("knockout_run")
    knock = f" The knockout map above includes the best design's run, {html.escape(knocked)}." if knocked else ""
    if d.get("cycle_note"):
        knock += f" {html.escape(d['cycle_note'])}."
    if d.get("cycle_run"):
        knock += f" The gate cycling section shows {html.escape(d['cycle_run'])}."
    return f"""
<section id="sec-designs"><h2>Designs against the weak spots</h2>
<p id="designs-verdict">{html.escape(conclusion(d["rows"]))}</p>
<figure>{figure_html("fig-designs", spec(d))}
<figcaption>Each design's mean accuracy over residues against its gap (best − worst residue), one point per seed
(hollow: not learned, so a small gap is flatness for the wrong reason), a cross at the seed mean (its gap over the
learned seeds); the shape marks
the control, the baseline and the candidates. Lower right is better; click a design in the legend to pick it out.
</figcaption></figure>
<table class="data" id="designs-table"><thead><tr><th>design</th><th>seeds</th><th>cache B/token</th><th>mean</th>
<th>mean over seeds [95% CI]</th><th>worst</th><th>gap</th><th>gap over learned seeds [95% CI]</th><th>period diff.</th>
<th>target</th></tr></thead><tbody>{body}</tbody></table>{tests}
<p class="sub">One value per seed, accuracies in percent, gap = best - worst residue in points; over seeds: the mean
with a t interval (none with one seed). Target: every seed
learned, and on seed means a gap within 5 points of full attention's, a mean at least W8/S8's, the same cache bytes per
token.{knock} Source: {html.escape(d["file"])}.</p></section>"""
