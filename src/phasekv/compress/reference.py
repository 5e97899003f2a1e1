"""Compressor entries computed by a direct loop over windows and offsets, from the formulas.

    s_{j,i} = Z_i h_{j,i} + b_i,   alpha_{j,.} = softmax(s_{j,.}),   K_j = sum_i alpha_{j,i} * C_i h_{j,i}

Slow and plain; tests check the batched compressors against it. Slots before position 0 (padded
first windows) are left out of the softmax, i.e. they get weight 0. Window j's slot i is position
o + j*S + i (o: the geometry's offset); with token_shift its token reads [h_p ; h_{p-1}], h_{-1} = 0.
With gate_norm="sigmoid" alpha_{j,i} = sigmoid(s_{j,i}) / W instead of the softmax. What s_{j,i} and
C_i h_{j,i} are for one token, and what an entry is made of the gated sum, each kind states in its own
module (`Compressor.reference_terms`, `Compressor.reference_entry`); this loop places the windows.
"""

from __future__ import annotations

import torch

from .base import Compressor
from .windows import WindowGeometry


def reference_entries(comp: Compressor, h: torch.Tensor, head: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """h: [B, T, d] from position 0 -> (key, value), each [B, n, kv_heads, head_dim], for every written window;
    with `head`, KV head `head` alone ([B, n, 1, head_dim]) on its own grid: window j starts at
    ((o + o_head) mod S) + j*S, o_head = the head's offset (stagger="kv_head")."""
    geometry = comp.geometry
    if head is not None and comp.head_offsets[head]:
        start = (geometry.offset + comp.head_offsets[head]) % geometry.stride
        geometry = WindowGeometry(geometry.window, geometry.stride, geometry.pad_first, geometry.entry_position, start)
    window = geometry.window
    branches = comp.branches
    heads = range(comp.kv_heads) if head is None else [head]
    batch, length, _ = h.shape
    out = torch.zeros(branches, batch, geometry.num_complete(length), len(heads), comp.head_dim, dtype=h.dtype)
    for n, j in enumerate(range(geometry.first_index, geometry.last_complete(length) + 1)):
        slots = [(i, geometry.window_start(j) + i) for i in range(window) if geometry.window_start(j) + i >= 0]
        for branch in range(branches):
            for column, head in enumerate(heads):
                logits, payloads = [], []
                for i, t in slots:
                    s, c = comp.reference_terms(_token(comp, h, t), i, branch, head)
                    logits.append(s)
                    payloads.append(c)
                if comp.cfg.gate_norm == "sigmoid":
                    alpha = torch.sigmoid(torch.stack(logits)) / window  # each offset on its own
                else:
                    alpha = torch.softmax(torch.stack(logits), dim=0)  # over offsets
                entry = sum(a * c for a, c in zip(alpha, payloads, strict=True))
                out[branch, :, n, column] = comp.reference_entry(entry)
    return out[0], out[-1]


def _token(comp, h: torch.Tensor, t: int) -> torch.Tensor:
    """What the compressor reads at position t of h [B, T, d]: h_t, or [h_t ; h_{t-1}] with token_shift."""
    if not comp.cfg.token_shift:
        return h[:, t]
    return torch.cat([h[:, t], h[:, t - 1] if t > 0 else torch.zeros_like(h[:, t])], dim=-1)
