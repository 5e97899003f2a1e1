"""Figure-4-style plot of a Theorem 2 run: each gate's path in the (static, per-window) plane."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_concentration_trajectories(result: dict, path: str | Path) -> None:
    """Save a PNG: every head's key (solid) and value (dashed) gate, in the plane and over steps.

    Args:
        result: a :func:`~phasekv.theory.theorem2.train_gates` result.
        path: where to write the PNG.

    Left: each path in the (static, per-window) plane runs from the first record (open circle) to
    the last (filled); the dashed diagonal is where a gate gives each position the same weight in
    every window; both axes run 1..S. Right: the static effective number against the step.
    """
    trajectory = result["trajectory"]
    params = result["params"]
    chunk_size, n_heads = params["chunk_size"], params["n_heads"]
    figure, (plane, course) = plt.subplots(1, 2, figsize=(10, 4.8))
    plane.plot([1, chunk_size], [1, chunk_size], ":", color="grey", linewidth=1)
    for head in range(n_heads):
        color = plt.cm.tab10(head % 10)
        for gate, style in (("key", "-"), ("value", "--")):
            static = [row[head] for row in trajectory[f"{gate}_static"]]
            per_window = [row[head] for row in trajectory[f"{gate}_per_window"]]
            plane.plot(static, per_window, style, color=color, label=f"head {head} {gate}")
            plane.plot(static[0], per_window[0], "o", mfc="none", color=color)
            plane.plot(static[-1], per_window[-1], "o", color=color)
            course.plot(trajectory["step"], static, style, color=color, label=f"head {head} {gate}")
    plane.set_xlim(0.9, chunk_size + 0.1)
    plane.set_ylim(0.9, chunk_size + 0.1)
    plane.set_xlabel("static effective number exp(H(E[p]))")
    plane.set_ylabel("per-window effective number E[exp(H(p))]")
    plane.legend(fontsize=7, loc="upper left")
    course.set_ylim(0.9, chunk_size + 0.1)
    course.set_xlabel("step")
    course.set_ylabel("static effective number")
    final = result["final"]
    figure.suptitle(
        f"m={n_heads} S={chunk_size} N={params['n_tokens']} γ={params['gamma']} β={params['beta']} "
        f"ρ={params['rho']} seed={params['seed']}: key positions {final['selected_positions']}, "
        f"uncovered {final['uncovered_positions']}",
        fontsize=9,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
