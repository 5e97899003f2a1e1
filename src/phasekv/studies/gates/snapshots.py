"""Gate-metric rows from a training gate snapshot (`phasekv.train.gates` writes `<run>/gates/step_N.json`):
the same rows `phasekv gates` measures on prompts, so a trajectory reads like a gates result."""

from __future__ import annotations


def snapshot_rows(snapshot: dict) -> list[dict]:
    """Rows like `gate_metrics` from a training gate snapshot (`phasekv.train.gates`)."""
    window, stride = snapshot["window"], snapshot["stride"]
    rows = []
    for layer in snapshot["layers"]:
        for branch in ("key", "value"):
            if branch not in layer:
                continue
            stats = layer[branch]
            for head, mean in enumerate(stats["mean_by_offset"]):
                share = [0.0] * stride
                for offset, weight in enumerate(mean):
                    share[offset % stride] += weight * stride
                if branch == "value":
                    share = share[1:] + share[:1]
                row = {
                    "layer": layer["layer"],
                    "kv_head": head,
                    "branch": branch,
                    "window": window,
                    "stride": stride,
                    "static_offsets": stats["static_effective"][head],
                    "per_window_offsets": stats["per_window_effective"][head],
                    "phase_share": share,
                    "value_shifted_back": branch == "value",
                }
                if "static_effective_phases" in stats:
                    row["static_phases"] = stats["static_effective_phases"][head]
                    row["per_window_phases"] = stats["per_window_effective_phases"][head]
                rows.append(row)
    return rows
