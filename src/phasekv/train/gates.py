"""Gate snapshots: how each compressor gate spreads its weight over window offsets, at one step.

For every layer and gate branch (key, value) the snapshot holds, per KV head, the mean gate weight
at each offset (over probe sequences, windows and channels) and the static and per-window
effective numbers of offsets (`phasekv.internals.concentration`; channels of vector gates count as
windows); sigmoid gates as shares of each window's total (`gate_shares`). Overlapping windows (W > S)
also get effective numbers of phases. Saved as
`run_dir/gates/step_XXXXXX.json` for the gate-trajectory analysis.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch
from torch import nn

from phasekv.compress import join_head_calls
from phasekv.config import CompressionConfig
from phasekv.files import write_atomic
from phasekv.hooks import capture, hook_names
from phasekv.internals.concentration import effective_numbers, effective_phases, gate_shares

GATES_DIR = "gates"
_GATE = re.compile(r"^layers\.(\d+)\..*hook_gate_(key|value)$")


def gate_hooks(model: nn.Module) -> list[str]:
    """Names of the gate hook points (empty for full attention)."""
    return [name for name in hook_names(model) if _GATE.match(name)]


def _summary(alpha: torch.Tensor, window: int, stride: int, gate_norm: str = "softmax") -> dict:
    """alpha [B, n, W, kv, g] -> per-head statistics (lists over KV heads)."""
    alpha = gate_shares(alpha.float(), 2, gate_norm)
    windows = (0, 1, 4)
    eff = effective_numbers(alpha, dim=2, window_dims=windows)
    out = {
        "mean_by_offset": alpha.mean(dim=windows).T.tolist(),  # [kv][W]
        "static_effective": eff.static.tolist(),
        "per_window_effective": eff.per_window.tolist(),
    }
    if window > stride:
        phases = effective_phases(alpha, stride, dim=2, window_dims=windows)
        out["static_effective_phases"] = phases.static.tolist()
        out["per_window_effective_phases"] = phases.per_window.tolist()
    return out


@torch.no_grad()
def gate_snapshot(model: nn.Module, compression: CompressionConfig, inputs: torch.Tensor, step: int) -> dict | None:
    """Statistics of every gate on `inputs` [B, T]; None when the model has no gates.

    `model` is the (unwrapped or FSDP) PhaseKVModel with `compression`; under FSDP every rank must call.
    """
    names = gate_hooks(model)
    if not names:
        return None
    comp = compression
    with capture(model, names) as store:
        model(inputs)
    layers: dict[int, dict] = {}
    for name in names:
        if not store[name]:
            continue
        layer, branch = _GATE.match(name).groups()
        alpha = join_head_calls(store[name])  # one call, or one per KV head of a head-staggered layer
        layers.setdefault(int(layer), {})[branch] = _summary(alpha, comp.window, comp.stride, comp.gate_norm)
    return {
        "step": step,
        "window": comp.window,
        "stride": comp.stride,
        "probe_sequences": int(inputs.shape[0]),
        "layers": [{"layer": i, **layers[i]} for i in sorted(layers)],
    }


def write_snapshot(run_dir: Path, snapshot: dict) -> Path:
    path = run_dir / GATES_DIR / f"step_{snapshot['step']:06d}.json"
    write_atomic(path, lambda tmp: Path(tmp).write_text(json.dumps(snapshot) + "\n"))
    return path
