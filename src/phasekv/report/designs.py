"""Issue #9's design comparison (`phasekv reproduce --profile mitigations`): a table, and mean vs gap per seed."""

from __future__ import annotations

from pathlib import Path
from statistics import fmean

from .common import num, nums, plt, save_figure
from .load import Inputs


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
        }
        for d in data["designs"]
    ]
    return {"file": results[-1].path.as_posix(), "rows": rows, "knockout_run": data.get("knockout_run")}


def png(data: dict, inputs: Inputs, out_dir: Path) -> list[Path]:
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, row in enumerate(data["rows"]):
        marker = {"control": "s", "baseline": "D"}.get(row["role"], "o")
        color = palette[i % len(palette)]
        for mean, gap, learned in zip(row["mean"], row["gap"], row["learned"], strict=True):
            # a seed at chance is drawn hollow: its small gap is flatness for the wrong reason
            ax.scatter(mean, gap, marker=marker, s=36, edgecolors=color, facecolors=color if learned else "none")
        ax.plot(fmean(row["mean"]), fmean(row["gap"]), marker="+", ms=12, color=color, ls="", label=row["design"])
    ax.set_xlabel("mean accuracy over residues (%)")
    ax.set_ylabel("gap: best - worst residue (points)")
    ax.set_xlim(-3, 103)
    ax.set_ylim(-3, 103)
    ax.set_title(
        "Designs at W8/S8's cache size\none point per seed (hollow: not learned), + = seed mean; lower right is better",
        fontsize=8,
    )
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    return [save_figure(fig, out_dir / "designs.png")]
