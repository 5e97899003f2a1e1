"""The reproduction's table (like the paper's: validation loss, mean, worst, gap) and its figure.

A model whose mean accuracy is not clearly above the level of guessing among the names present in
the prompt (1 / records) has not learned retrieval: it is labelled "not learned (chance)" and its
flatness is never presented as a result.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def learned(result: dict) -> bool:
    """True when the lower end of the mean accuracy's 95% interval exceeds twice the name-guessing level."""
    records = result["lookup_options"]["n_records"]
    low = result["summary"]["stat_intervals"]["mean"][0]
    return low > 2.0 / records


def _stride(result: dict) -> int | None:
    return result["stride"]["value"] if result["stride"]["source"].startswith("model") else None


def table_rows(results: dict[str, dict]) -> list[dict]:
    rows = []
    for name, r in results.items():
        s = r["summary"]
        rows.append(
            {
                "run": name,
                "model": r["label"],
                "val_loss": r["training"]["final_val_loss"],
                "mean": 100 * s["mean"],
                "worst": 100 * s["worst"],
                "best": 100 * s["best"],
                "gap": s["gap_points"],
                "gap_ci": s["stat_intervals"]["gap_points"] if "gap_points" in s["stat_intervals"] else None,
                "period_diff": s["period_difference_points"],
                "stride": _stride(r),
                "p_value": s["uniformity"]["p_value"],
                "learned": learned(r),
            }
        )
    return rows


def markdown_table(rows: list[dict]) -> str:
    head = (
        "| Model | val. loss | mean | worst | gap (95% CI) | period diff. | p (uniform) | status |\n"
        "|---|---:|---:|---:|---:|---:|---:|---|"
    )
    lines = [head]
    for row in rows:
        ci = row["gap_ci"]
        gap = f"{row['gap']:.1f}" + (f" [{ci[0]:.1f}, {ci[1]:.1f}]" if ci else "")
        period = "-" if row["stride"] is None else f"{row['period_diff']:.1f} (S={row['stride']})"
        loss = "-" if row["val_loss"] is None else f"{row['val_loss']:.3f}"
        status = "learned" if row["learned"] else "**not learned (chance)**"
        lines.append(
            f"| {row['model']} | {loss} | {row['mean']:.1f} | {row['worst']:.1f} | {gap} | {period} | "
            f"{row['p_value']:.3g} | {status} |"
        )
    lines.append(
        "\nAccuracies in percent (full-vocabulary top-1), gap = best - worst residue in points, "
        "period diff. = mean |A(r) - A(r+S)|; residues are target-key positions mod the probe's modulus."
    )
    return "\n".join(lines)


def plot_residues(results: dict[str, dict], path: Path) -> Path:
    """Accuracy by residue with 95% bands: one panel per compressed run, full attention in gray behind it."""
    controls = {n: r for n, r in results.items() if r["preset"].startswith("full")}
    others = {n: r for n, r in results.items() if n not in controls}
    panels = list(others.items()) or list(controls.items())
    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 3.6 * rows), squeeze=False, sharey=True)
    for ax, (_name, r) in zip(axes.ravel(), panels, strict=False):
        for control in controls.values():
            _series(ax, control, color="0.6", label=_status_label(control), dashed=True)
        _series(ax, r, color="C3" if learned(r) else "C0", label=_status_label(r))
        stride = _stride(r)
        modulus = len(r["summary"]["accuracy"])
        if stride:
            for x in range(stride, modulus, stride):
                ax.axvline(x - 0.5, color="0.3", ls="--", lw=0.8)
            ax.plot(
                range(stride - 1, modulus, stride),
                [-4] * len(range(stride - 1, modulus, stride)),
                "v",
                color="0.3",
                ms=5,
                clip_on=False,
            )
        ax.set_title(r["label"], fontsize=10)
        ax.set_xlabel(f"target-key position mod {modulus}")
        ax.set_ylim(-6, 104)
        ax.legend(fontsize=7, loc="lower right")
    for ax in axes[:, 0]:
        ax.set_ylabel("accuracy (%)")
    for ax in axes.ravel()[len(panels) :]:
        ax.axis("off")
    fig.suptitle(
        "Lookup accuracy by residue, 95% bootstrap bands over mappings\n"
        "dashed: period boundaries; triangles: boundary phase S-1; gray: full attention",
        fontsize=9,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path


def _status_label(r: dict) -> str:
    return r["label"] + ("" if learned(r) else " - not learned (chance)")


def _series(ax, r: dict, color: str, label: str, dashed: bool = False) -> None:
    s = r["summary"]
    x = list(range(len(s["accuracy"])))
    ax.fill_between(x, [100 * v for v in s["ci_low"]], [100 * v for v in s["ci_high"]], color=color, alpha=0.2, lw=0)
    ax.plot(
        x,
        [100 * v for v in s["accuracy"]],
        color=color,
        ls="--" if dashed else "-",
        marker="o",
        ms=2.5,
        lw=1.2,
        label=label,
    )
