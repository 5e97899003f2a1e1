"""The reproduction's table, like the paper's: validation loss, mean, worst, gap (the figure is the report's).

A model whose mean accuracy is not clearly above the level of guessing among the names present in
the prompt (1 / records) has not learned retrieval: it is labelled "not learned (chance)" and its
flatness is never presented as a result.
"""

from __future__ import annotations

from pathlib import Path

from ..stats.format import verdict_cell
from ..studies.probe.like import remeasure_list
from ..studies.probe.result import ProbeResult, learned


def _stride(result: dict) -> int | None:
    return result["stride"]["value"] if result["stride"]["source"].startswith("model") else None


def remeasure_command(name: str, result: dict, results_dir: Path | None) -> str | None:
    """`phasekv eval lookup --like RESULTS_DIR/NAME.json`: the result names its checkpoint, so the command needs no
    MODEL; None for a reading no eval flag makes (DeepSeek-V4's every-entry counterfactual) or without a folder."""
    if results_dir is None or "counterfactual" in result:
        return None
    return f"phasekv eval lookup --like {results_dir / f'{name}.json'}"


def table_rows(results: dict[str, dict], results_dir: Path | None = None) -> list[dict]:
    """One row per result; `results_dir`, where the results are, gives each row the command that re-measures it."""
    rows = []
    for name, r in results.items():
        s, typed = r["summary"], ProbeResult.from_dict(r)
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
                "learned": learned(typed),
                "phase_test": typed.phase_verdict,
                "command": remeasure_command(name, r, results_dir),
            }
        )
    return rows


def markdown_table(rows: list[dict]) -> str:
    head = (
        "| Model | val. loss | mean | worst | gap (95% CI) | period diff. | p (uniform) | phase verdict (amplitude, "
        "p, MDE) | status |\n"
        "|---|---:|---:|---:|---:|---:|---:|---|---|"
    )
    lines = [head]
    for row in rows:
        ci = row["gap_ci"]
        gap = f"{row['gap']:.1f}" + (f" [{ci[0]:.1f}, {ci[1]:.1f}]" if ci else "")
        period = "-" if row["stride"] is None else f"{row['period_diff']:.1f} (S={row['stride']})"
        loss = "-" if row["val_loss"] is None else f"{row['val_loss']:.3f}"
        status = "learned" if row["learned"] else "**not learned (chance)**"
        test = row.get("phase_test")
        verdict = verdict_cell(test) or "-"
        lines.append(
            f"| {row['model']} | {loss} | {row['mean']:.1f} | {row['worst']:.1f} | {gap} | {period} | "
            f"{row['p_value']:.3g} | {verdict} | {status} |"
        )
    lines.append(
        "\nAccuracies in percent (full-vocabulary top-1), gap = best - worst residue in points, "
        "period diff. = mean |A(r) - A(r+S)|; residues are target-key positions mod the probe's modulus; "
        "p (uniform) is the paper's residue test, which a smooth effect of position can fool; the phase verdict "
        "compares the phase frequencies k/P with their neighbours after each unit's smooth curve and needs the phase "
        "amplitude's lower bound (points) to clear 5 points; MDE = the smallest drop at one phase found with 80% power."
    )
    if any(row.get("command") for row in rows):
        lines.append(remeasure_list((row["model"], row.get("command")) for row in rows))
    return "\n".join(lines)
