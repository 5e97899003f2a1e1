"""Compressed attention for one query without gradients (a decoding step): the semantics of `KVView`.

Every entry up to the first with entry_end > t and the exact tokens t-L+1..t are visible, so nothing is
masked: scores [B, Hkv, G, n_vis + L (+ 1)], one softmax, two matmuls with the values. A dozen small ops:
the per-step overhead is what counts here (the fused autograd path, `autograd.py`, plans chunks and masks).
"""

from __future__ import annotations

import torch

from .state import KVView


def decode_attention(q: torch.Tensor, q_start: int, kv: KVView) -> torch.Tensor:
    """q: [B, 1, H, hd] at position q_start -> z [B, 1, H, hd]."""
    batch, _, heads, dim = q.shape
    kv_heads = kv.exact_k.shape[2]
    group = heads // kv_heads
    acc = torch.promote_types(q.dtype, torch.float32)
    qg = q.reshape(batch, kv_heads, group, dim) * dim**-0.5  # [B, Hkv, G, hd]
    lo = max(q_start - kv.local_window + 1, 0, kv.exact_start) - kv.exact_start
    hi = q_start - kv.exact_start + 1
    band_k, band_v = kv.exact_k[:, lo:hi].transpose(1, 2), kv.exact_v[:, lo:hi].transpose(1, 2)  # [B, Hkv, n, hd]
    n_vis = int(torch.searchsorted(kv.entry_end, q_start, right=True)) if kv.entry_end.numel() else 0
    parts = [qg @ band_k.transpose(-1, -2)]
    if n_vis:
        parts.insert(0, qg @ kv.entry_k[:, :n_vis].transpose(1, 2).transpose(-1, -2))
    if kv.sink is not None:  # a sink logit only adds exp(sink) to the denominator
        parts.append(kv.sink.to(parts[0].dtype).view(1, kv_heads, group, 1).expand(batch, -1, -1, -1))
    probs = torch.softmax(torch.cat(parts, dim=-1).to(acc), dim=-1).to(q.dtype)
    out = probs[..., n_vis : n_vis + hi - lo] @ band_v
    if n_vis:
        out = out + probs[..., :n_vis] @ kv.entry_v[:, :n_vis].transpose(1, 2)
    return out.reshape(batch, 1, heads, dim)
