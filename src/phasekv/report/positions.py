"""Accuracy against absolute target position: the prompts of a lookup or needle run binned by t_K,
with Wilson 95% intervals per bin, drawn from the per-prompt records (`evaluate.record`). A smooth
trend in position (a step, a slope, lost in the middle) shows here as a trend, beside the residue
plot where it could pass for a phase effect."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..stats import wilson_interval
from .common import num, nums, plt, save_figure

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


def png(series: list[dict], out_dir: Path) -> list[Path]:
    """One panel per result with records: accuracy by binned target position with 95% bands."""
    panels = [s for s in series if s["positions"] is not None]
    if not panels:
        return []
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.4 * rows), squeeze=False, sharey=True)
    for ax, s in zip(axes.ravel(), panels, strict=False):
        p = s["positions"]
        ax.fill_between(p["center"], p["low"], p["high"], color="C0", alpha=0.2, lw=0)
        ax.plot(p["center"], p["accuracy"], color="C0", marker="o", ms=3, lw=1.2)
        ax.set_title(s["name"], fontsize=9)
        ax.set_xlabel("target position t_K (binned)")
        ax.set_ylim(-4, 104)
    for ax in axes[:, 0]:
        ax.set_ylabel("accuracy (%)")
    for ax in axes.ravel()[len(panels) :]:
        ax.axis("off")
    fig.suptitle("Accuracy by absolute target position with Wilson 95% bands (prompts as independent)", fontsize=9)
    fig.tight_layout()
    return [save_figure(fig, out_dir / "positions.png")]
