"""Accuracy by residue (the paper's Figure 2 and needle figure), the summary table, and beside them
accuracy by absolute target position (`positions`)."""

from __future__ import annotations

from pathlib import Path

from . import positions
from .common import num, nums, plt, save_figure
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
        d, p = r.data, r.probe
        s = p.summary
        compressed = p.compressed
        stride = p.stride.value if compressed else None
        training = p.extra("training") or {}
        series.append(
            {
                "id": len(series),
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
    compressed = [x for x in series if x["compressed"]]
    selected = (compressed or series)[0]["id"]
    return {
        "series": series,
        "selected": selected,
        "probes": sorted({x["probe"] for x in series}),
        "without_records": [x["name"] for x in series if x["positions"] is None],
        "no_records_note": positions.NO_RECORDS,
    }


def png(data: dict, inputs: Inputs, out_dir: Path) -> list[Path]:
    """One panel per compressed model (full attention dashed gray behind it)."""
    series = data["series"]
    full = [x for x in series if x["full"]]
    panels = [x for x in series if not x["full"]] or full
    cols = min(3, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.4 * rows), squeeze=False, sharey=True)
    for ax, s in zip(axes.ravel(), panels, strict=False):
        for f in full:
            if f is not s and f["modulus"] == s["modulus"]:
                _draw(ax, f, "0.55", dashed=True)
        _draw(ax, s, "C3")
        m, stride = s["modulus"], s["stride"]
        if stride:
            for x in range(stride, m, stride):
                ax.axvline(x - 0.5, color="0.3", ls="--", lw=0.8)
            marks = list(range(stride - 1, m, stride))
            ax.plot(marks, [-5] * len(marks), "v", color="0.3", ms=5, clip_on=False)
        ax.set_title(s["name"], fontsize=9)
        ax.set_xlabel(f"target position mod {m}")
        ax.set_ylim(-7, 104)
        ax.legend(fontsize=7, loc="lower right")
    for ax in axes[:, 0]:
        ax.set_ylabel("accuracy (%)")
    for ax in axes.ravel()[len(panels) :]:
        ax.axis("off")
    fig.suptitle(
        "Accuracy by residue with 95% bands; dashed: period boundaries, triangles: boundary phase S-1", fontsize=9
    )
    fig.tight_layout()
    return [save_figure(fig, out_dir / "residues.png"), *positions.png(series, out_dir)]


def _draw(ax, s: dict, color: str, dashed: bool = False) -> None:
    x = list(range(s["modulus"]))
    low = [float("nan") if v is None else v for v in s["low"]]
    high = [float("nan") if v is None else v for v in s["high"]]
    ax.fill_between(x, low, high, color=color, alpha=0.2, lw=0)
    label = s["name"] + (" - not shown above guessing" if s["learned"] is False else "")
    ax.plot(x, s["accuracy"], color=color, ls="--" if dashed else "-", marker="o", ms=2.5, lw=1.2, label=label)
