"""Accuracy against absolute target position: the prompts of a lookup or needle run binned by t_K,
with Wilson 95% intervals per bin, drawn from the per-prompt records (`results.record`). A smooth
trend in position (a step, a slope, lost in the middle) shows here as a trend, beside the residue
plot where it could pass for a phase effect."""

from __future__ import annotations

import json

import altair as alt
import numpy as np

from phasekv.charts import vega
from phasekv.charts.labels import num, nums
from phasekv.stats import wilson_interval

MAX_BINS = 12
NO_RECORDS = "no per-prompt records in this result file (written before they were recorded): re-run the probe"


def position_bins(target_position, correct, max_bins: int = MAX_BINS) -> dict:
    """Prompts binned by target position: at most `max_bins` bins of equal width over the integer
    positions min(t_K)..max(t_K) (one bin per position when there are fewer), empty bins dropped.

    Returns lists, one entry per bin: `first` and `last` (the integer positions the bin spans),
    `center` (mean t_K of its prompts), `n` (prompts), `accuracy`, and the Wilson 95% interval
    `low`, `high` (proportions; prompts counted as independent)."""
    t = np.asarray(target_position, dtype=np.int64)
    hit = np.asarray(correct, dtype=bool)
    if t.ndim != 1 or t.shape != hit.shape or t.size == 0:
        raise ValueError("target positions and correct flags must be non-empty lists of one length")
    lo, hi = int(t.min()), int(t.max())
    n_bins = min(max_bins, hi - lo + 1)
    edges = np.linspace(lo, hi + 1, n_bins + 1)  # bin i holds the positions in [edges[i], edges[i + 1])
    which = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, n_bins - 1)
    n = np.bincount(which, minlength=n_bins)
    keep = n > 0
    hits = np.bincount(which, weights=hit, minlength=n_bins)[keep].round().astype(np.int64)
    sums = np.bincount(which, weights=t, minlength=n_bins)[keep]
    low, high = wilson_interval(hits, n[keep])
    firsts = np.ceil(edges[:-1]).astype(np.int64)[keep]
    lasts = (np.ceil(edges[1:]).astype(np.int64) - 1)[keep]
    return {
        "first": firsts.tolist(),
        "last": lasts.tolist(),
        "center": (sums / n[keep]).tolist(),
        "n": n[keep].tolist(),
        "accuracy": (hits / n[keep]).tolist(),
        "low": low.tolist(),
        "high": high.tolist(),
    }


def series_positions(data: dict) -> dict | None:
    """The binned accuracy of one result (percent, rounded for the page), or None without records."""
    records = (data.get("prompt_records") or {}).get("columns")
    if not records or "target_position" not in records or "correct" not in records:
        return None
    bins = position_bins(records["target_position"], records["correct"])
    return {
        "first": bins["first"],
        "last": bins["last"],
        "center": nums(bins["center"], 2),
        "n": bins["n"],
        "accuracy": nums(bins["accuracy"], 3, 100),
        "low": nums(bins["low"], 3, 100),
        "high": nums(bins["high"], 3, 100),
        "min": num(min(bins["first"]), 0),
        "max": num(max(bins["last"]), 0),
    }


def spec(series: list[dict], choices: list[str]) -> dict:
    """One panel per result with records: accuracy by binned target position with Wilson 95% bands,
    the result's mean accuracy (dashed) and each bin's width (thin bar). Param `model` ("all" or one
    of `choices`, the residue figure's panels) matches the residue figure's: the page moves both together."""
    drawn = [s for s in series if s["positions"] is not None]
    rows = []
    for order, s in enumerate(drawn):
        p = s["positions"]
        for i in range(len(p["n"])):
            bin_ = {k: p[k][i] for k in ("first", "last", "center", "n", "accuracy", "low", "high")}
            rows.append({"model": s["name"], "order": order, "mean": s["mean"], **bin_})
    model = alt.param(name="model", value="all", bind=alt.binding_select(options=["all", *choices], name="model "))
    # explicit x domains (the chosen model's positions, all of them for "all"): no extent of an emptied layer
    spans = {s["name"]: [s["positions"]["min"] - 0.5, s["positions"]["max"] + 0.5] for s in drawn}
    every = [min(lo for lo, _ in spans.values()), max(hi for _, hi in spans.values())] if spans else [0, 1]
    domain = alt.ExprRef(expr=f"({json.dumps(spans)})[model] || {json.dumps(every)}")
    positions = alt.Scale(domain=domain, nice=False)
    x = alt.X("center:Q", title="target position t_K (prompts binned)", scale=positions)
    y = alt.Y("accuracy:Q", title="accuracy (%)", scale=alt.Scale(domain=[0, 100]))
    base = alt.Chart()
    band = base.mark_area(opacity=0.16, color=vega.SELECTED).encode(x=x, y="low:Q", y2="high:Q")
    tooltip = ["first:Q", "last:Q", "n:Q", "accuracy:Q", "low:Q", "high:Q"]
    line = base.mark_line(color=vega.SELECTED, point=alt.OverlayMarkDef(color=vega.SELECTED))
    line = line.encode(x=x, y=y, tooltip=tooltip)
    widths = base.transform_calculate(start="datum.first - 0.5", end="datum.last + 0.5")
    widths = widths.mark_rule(color=vega.SELECTED, opacity=0.45).encode(
        x=alt.X("start:Q", scale=positions), x2="end:Q", y=y
    )
    mean = base.mark_rule(color="#8a8a8a", strokeDash=[5, 3]).encode(y="mean(mean):Q")
    chart = alt.layer(band, widths, line, mean).properties(width=280, height=180)
    facet = alt.Facet("model:N", title=None, sort=alt.SortField("order"))
    chart = chart.facet(facet=facet, columns=3, data=vega.values(rows))
    chart = chart.transform_filter("model == 'all' || datum.model == model").add_params(model)
    return vega.finish(chart.properties(title=TITLE, description=TITLE))


TITLE = "Accuracy by absolute target position with Wilson 95% bands (prompts as independent); dashed: mean accuracy"
