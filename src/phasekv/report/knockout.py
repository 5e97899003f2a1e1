"""Knockout maps (the paper's Figure 3) and, per head, its gate preference by phase (Figure 5)."""

from __future__ import annotations

from pathlib import Path

from .common import model_name, nums
from .load import Inputs, Result


def label(row: dict) -> str:
    """'L3' for a whole layer, 'L3H1' for a KV head."""
    return f"L{row['layer']}" if row.get("kv_head") is None else f"L{row['layer']}H{row['kv_head']}"


def _run_dir(path) -> str | None:
    """The training run directory of a checkpoint path (`<run>/checkpoints/step_N`), resolved."""
    if not path:
        return None
    p = Path(path)
    return str((p.parent.parent if p.parent.name == "checkpoints" else p).resolve())


def _gate_sources(inputs: Inputs) -> list[tuple[dict | None, str | None, list[dict]]]:
    """(model config or None, model path or run dir, key/value gate rows) from gate results and the
    last step of trajectories."""
    sources = [
        ((g.data.get("model") or {}).get("config"), (g.data.get("model") or {}).get("path"), g.data["rows"])
        for g in inputs.of("gates")
    ]
    for t in inputs.of("gate_trajectory"):
        if t.data["steps"]:
            sources.append((None, t.data.get("run_dir"), t.data["steps"][-1]["rows"]))
    return sources


def _match_gates(knockout: Result, sources) -> tuple[dict, str]:
    """Gate rows by (layer, kv_head) for the knockout's model: same model config, else the only
    source with exactly its heads."""
    info = knockout.data.get("model") or {}
    config, run = info.get("config"), _run_dir(info.get("path"))
    heads = {(t["layer"], t["kv_head"]) for t in knockout.data["targets"]}
    same_run = [rows for _, path, rows in sources if run is not None and _run_dir(path) == run]
    exact = [rows for cfg, path, rows in sources if config is not None and cfg == config and path == info.get("path")]
    same_heads = [rows for _, _, rows in sources if {(r["layer"], r["kv_head"]) for r in rows} == heads]
    if exact:
        rows, how = exact[0], "same checkpoint"
    elif same_run:
        rows, how = same_run[0], "same training run"
    elif len(same_heads) == 1:
        rows, how = same_heads[0], "the only gate result with these heads"
    else:
        rows, how = None, ""
    if rows is None:
        return {}, ""
    table: dict = {}
    for r in rows:
        entry = table.setdefault(label(r), {"stride": r["stride"], "window": r["window"]})
        entry[r["branch"]] = nums(r["phase_share"], 3)
        if r["branch"] == "key":
            entry["key_static"] = round(float(r.get("static_phases", r["static_offsets"])), 3)
            entry["key_static_max"] = r["stride"] if "static_phases" in r else r["window"]
    return table, how


def section(inputs: Inputs) -> dict | None:
    results = inputs.of("knockout")
    if not results:
        return None
    sources = _gate_sources(inputs)
    maps = []
    for r in results:
        d = r.data
        gates, how = _match_gates(r, sources) if d["mode"] == "heads" else ({}, "")
        maps.append(
            {
                "name": model_name(d, r.name),
                "file": r.path.as_posix(),
                "mode": d["mode"],
                "stride": d["stride"]["value"],
                "modulus": d["modulus"],
                "clean_phase": nums(d["clean"]["accuracy_by_phase"], 4, 100),
                "clean_residue": nums(d["clean"]["accuracy_by_residue"], 4, 100),
                "rows": [
                    {
                        "label": label(t),
                        "phase": nums(t["relative_change_by_phase"], 2),
                        "residue": nums(t["relative_change_by_residue"], 2),
                        "phase_points": nums(t["change_by_phase"], 2, 100),
                        "residue_points": nums(t["change_by_residue"], 2, 100),
                        "gate": gates.get(label(t)),
                    }
                    for t in d["targets"]
                ],
                "gates_from": how,
            }
        )
    return {"maps": maps}


def png(data: dict, inputs: Inputs, out_dir: Path) -> list[Path]:
    import numpy as np

    from .common import plt, save_figure

    paths = []
    for i, m in enumerate(data["maps"]):
        grid = np.array([[np.nan if v is None else v for v in row["phase"]] for row in m["rows"]], dtype=float)
        fig, ax = plt.subplots(figsize=(1.8 + 0.45 * grid.shape[1], 1.2 + 0.28 * grid.shape[0]))
        im = ax.imshow(np.clip(grid, -100, 100), cmap="RdBu", vmin=-100, vmax=100, aspect="auto")
        ax.set_yticks(range(len(m["rows"])), [row["label"] for row in m["rows"]], fontsize=7)
        ax.set_xticks(range(grid.shape[1]))
        ax.set_xlabel(f"target position mod {m['stride']}")
        ax.set_title(f"knockout: {m['name']}", fontsize=9)
        fig.colorbar(im, ax=ax, label="accuracy change relative to clean (%)")
        fig.tight_layout()
        paths.append(save_figure(fig, out_dir / f"knockout{'' if i == 0 else '_' + str(i)}.png"))
    return paths
