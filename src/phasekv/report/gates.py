"""The gate plane (the paper's Figure 4): static vs per-window effective number of each key gate,
with training trajectories."""

from __future__ import annotations

from pathlib import Path

from .common import model_name, num
from .knockout import label
from .load import Inputs


def _points(rows: list[dict]) -> list[dict]:
    return [
        {"label": label(r), "layer": r["layer"], "x": num(r["static_offsets"], 3), "y": num(r["per_window_offsets"], 3)}
        for r in rows
        if r["branch"] == "key" and r.get("channels", 1) == 1
    ]


def section(inputs: Inputs) -> dict | None:
    planes = []
    for g in inputs.of("gates"):
        rows = g.data["rows"]
        if rows:
            planes.append(
                {
                    "name": model_name(g.data, g.name),
                    "file": g.path.as_posix(),
                    "window": rows[0]["window"],
                    "points": _points(rows),
                    "paths": None,
                }
            )
    for t in inputs.of("gate_trajectory"):
        steps = [s for s in t.data["steps"] if s["rows"]]
        if not steps:
            continue
        paths: dict[str, list] = {}
        for s in steps:
            for p in _points(s["rows"]):
                paths.setdefault(p["label"], []).append([s["step"], p["x"], p["y"]])
        final = _points(steps[-1]["rows"])
        # trace the three most statically concentrated heads at the end
        traced = [p["label"] for p in sorted(final, key=lambda p: p["x"] if p["x"] is not None else 1e9)[:3]]
        planes.append(
            {
                "name": f"{model_name(t.data, t.name)} (training to step {steps[-1]['step']})",
                "file": t.path.as_posix(),
                "window": steps[0]["rows"][0]["window"],
                "points": final,
                "paths": {k: v for k, v in paths.items() if k in traced},
                "steps": [s["step"] for s in steps],
                "source": t.data.get("source", ""),
            }
        )
    planes = [p for p in planes if p["points"]]
    if not planes:
        return None
    layers = max(max(p["layer"] for p in plane["points"]) for plane in planes) + 1
    return {"planes": planes, "n_layers": layers}


def png(data: dict, inputs: Inputs, out_dir: Path) -> list[Path]:
    from matplotlib import colormaps

    from .common import plt, save_figure

    planes = data["planes"]
    cols = min(3, len(planes))
    rows = -(-len(planes) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 4 * rows), squeeze=False)
    cmap = colormaps["viridis"]
    for ax, plane in zip(axes.ravel(), planes, strict=False):
        w = plane["window"]
        ax.plot([1, w], [1, w], ls="--", color="0.5", lw=0.8)
        for trace in (plane["paths"] or {}).values():
            ax.plot([p[1] for p in trace], [p[2] for p in trace], color="0.3", lw=0.8)
            ax.plot(trace[0][1], trace[0][2], "o", mfc="none", color="0.3", ms=5)
        ax.scatter(
            [p["x"] for p in plane["points"]],
            [p["y"] for p in plane["points"]],
            c=[cmap(p["layer"] / max(1, data["n_layers"] - 1)) for p in plane["points"]],
            s=16,
        )
        ax.set_xlim(0.9, w + 0.1)
        ax.set_ylim(0.9, w + 0.1)
        ax.set_xlabel("static exp(H(E[alpha]))")
        ax.set_ylabel("per window E[exp(H(alpha))]")
        ax.set_title(plane["name"], fontsize=8)
    for ax in axes.ravel()[len(planes) :]:
        ax.axis("off")
    fig.tight_layout()
    return [save_figure(fig, out_dir / "gate_plane.png")]
