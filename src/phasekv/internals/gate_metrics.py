"""Gate diagnostics: how concentrated each KV head's key and value gates are, and on which phases.

For every compressed layer, KV head and branch (key, value), over many windows of text:
- static effective number of offsets exp(H(E[alpha])) and per-window E[exp(H(alpha))], 1..W;
- for overlapping windows (W > S) the same after pooling the offsets of each phase, 1..S;
- the mean gate score by phase relative to a uniform share (1 = uniform), value scores shifted back
  by one offset, so a head that keeps a key together with its successor peaks at the same phase.
Vector gates are measured per channel and then averaged over channels (`per_channel_mean`).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from phasekv.compress import join_head_calls
from phasekv.hooks import capture
from phasekv.internals.concentration import effective_numbers, gate_shares, pool_phases


def gate_hook_names(model) -> dict[tuple[int, str], str]:
    """(layer, branch) -> hook name, for every compressed layer of a PhaseKVModel."""
    names = {}
    for i, layer in enumerate(model.layers):
        comp = layer.self_attn.compressor
        if comp is None or comp.cfg.gate == "uniform":
            continue
        names[(i, "key")] = f"layers.{i}.self_attn.compressor.hook_gate_key"
        if not comp.cfg.shared_kv:
            names[(i, "value")] = f"layers.{i}.self_attn.compressor.hook_gate_value"
    return names


def collect_gates(model, batches: Iterable[torch.Tensor]) -> dict[tuple[int, str], torch.Tensor]:
    """Gate scores of every window of every batch: (layer, branch) -> alpha [windows, W, kv_heads, g] (a
    head-staggered layer's windows cut to the count that every KV head completes, `join_head_calls`)."""
    with torch.no_grad():  # not a decorator: mutmut leaves decorated functions unmutated
        names = gate_hook_names(model)
        if not names:
            raise ValueError(
                "this model has no learned gates (full attention or uniform averaging): nothing to measure"
            )
        collected: dict[tuple[int, str], list[torch.Tensor]] = {key: [] for key in names}
        for ids in batches:
            with capture(model, list(names.values())) as seen:
                model(ids)
            for key, name in names.items():
                # [B, n, W, kv, g]; a head-staggered layer's hook fires once per KV head
                alpha = gate_shares(join_head_calls(seen[name]), 2, _gate_norm(model, key[0]))
                collected[key].append(alpha.reshape(-1, *alpha.shape[2:]))
        return {key: torch.cat(parts) for key, parts in collected.items()}


def _gate_norm(model, layer: int) -> str:
    return model.layers[layer].self_attn.compressor.cfg.gate_norm


def head_metrics(alpha: torch.Tensor, stride: int, branch: str) -> list[dict]:
    """Metrics of one layer and branch. alpha: [windows, W, kv_heads, g] -> one dict per KV head."""
    window = alpha.shape[1]
    offsets = effective_numbers(alpha, dim=1, window_dims=(0,))  # [kv, g]
    phases = effective_numbers(pool_phases(alpha, stride, dim=1), dim=1, window_dims=(0,))
    share = pool_phases(alpha, stride, dim=1).mean(dim=(0, 3)) * stride  # [S, kv], 1 = uniform share
    if branch == "value":
        share = torch.roll(share, shifts=-1, dims=0)  # phase r shows the value weight at r + 1
    rows = []
    for head in range(alpha.shape[2]):
        row = {
            "kv_head": head,
            "branch": branch,
            "window": window,
            "stride": stride,
            "channels": alpha.shape[3],
            "per_channel_mean": alpha.shape[3] > 1,
            "static_offsets": offsets.static[head].mean().item(),
            "per_window_offsets": offsets.per_window[head].mean().item(),
            "phase_share": share[:, head].tolist(),
            "value_shifted_back": branch == "value",
        }
        if window > stride:
            row["static_phases"] = phases.static[head].mean().item()
            row["per_window_phases"] = phases.per_window[head].mean().item()
        rows.append(row)
    return rows


def gate_metrics(model, batches: Iterable[torch.Tensor]) -> list[dict]:
    """One row per (layer, KV head, branch) with the metrics above; JSON-serialisable."""
    rows = []
    for (layer, branch), alpha in collect_gates(model, batches).items():
        stride = model.layers[layer].self_attn.compressor.cfg.stride
        rows += [{"layer": layer, **row} for row in head_metrics(alpha, stride, branch)]
    return rows
