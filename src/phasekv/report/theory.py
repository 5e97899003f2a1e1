"""Theory: Theorem 2's concentration trajectories, the sweep's coverage table and Theorem 1's minimisers."""

from __future__ import annotations

from pathlib import Path

from .common import num, nums
from .load import Inputs

TABLE = [
    ("n_runs", "runs"),
    ("frac_concentrated", "concentrated"),
    ("frac_full_coverage", "full coverage"),
    ("mean_collisions", "collisions"),
    ("final_loss_mean", "final loss"),
    ("accuracy_mean", "accuracy"),
    ("min_position_accuracy_mean", "worst position"),
]


def section(inputs: Inputs) -> dict | None:
    runs = []
    for r in inputs.of("theorem2"):
        d, tr = r.data, r.data["trajectory"]
        runs.append(
            {
                "name": r.name,
                "file": r.path.as_posix(),
                "S": d["params"]["chunk_size"],
                "m": d["params"]["n_heads"],
                "steps": tr["step"],
                "key_static": [nums(v, 3) for v in tr["key_static"]],
                "key_per_window": [nums(v, 3) for v in tr["key_per_window"]],
                "value_static": [nums(v, 3) for v in tr.get("value_static", [])],
                "selected": d["final"]["selected_positions"],
                "uncovered": d["final"].get("uncovered_positions", []),
                "loss": num(d["final"].get("loss"), 4),
            }
        )
    sweeps = []
    for r in inputs.of("sweep"):
        grid = list(r.data["grid"])
        rows = [[row.get(k) for k in grid] + [num(row.get(k), 3) for k, _ in TABLE] for row in r.data["table"]]
        sweeps.append(
            {
                "name": r.name,
                "file": r.path.as_posix(),
                "columns": grid + [t for _, t in TABLE],
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


def png(data: dict, inputs: Inputs, out_dir: Path) -> list[Path]:
    from .common import plt, save_figure

    if not data["runs"]:
        return []
    run = data["runs"][0]
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for h in range(run["m"]):
        line = ax.plot(run["steps"], [v[h] for v in run["key_static"]], label=f"head {h} key static")[0]
        ax.plot(run["steps"], [v[h] for v in run["key_per_window"]], ls="--", color=line.get_color())
    ax.set_ylim(0.9, run["S"] + 0.1)
    ax.set_xlabel("step")
    ax.set_ylabel("effective number of positions")
    ax.set_title(f"Theorem 2 gates (S={run['S']}, m={run['m']}); dashed: per window", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return [save_figure(fig, out_dir / "theory.png")]
