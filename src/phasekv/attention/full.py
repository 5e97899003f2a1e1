"""Full causal attention (the baseline), on PyTorch's fused scaled_dot_product_attention."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def full_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_start: int, k_start: int) -> torch.Tensor:
    """q: [B, T, H, hd] at positions q_start..; k, v: [B, Tk, Hkv, hd] at positions k_start.. -> [B, T, H, hd].

    Grouped-query heads are passed as they are (`enable_gqa`): no per-call copy of each KV head for its
    H / Hkv query heads, which would dominate a decoding step over a long cache."""
    length, keys = q.shape[1], k.shape[1]
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    gqa = q.shape[2] != k.shape[2]
    if q_start == k_start and length == keys:
        z = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=gqa)
    elif k_start + keys - 1 <= q_start:  # every key is at or before the first query (a decoding step)
        z = F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=gqa)
    else:
        q_pos = torch.arange(q_start, q_start + length, device=q.device)
        k_pos = torch.arange(k_start, k_start + keys, device=q.device)
        z = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=k_pos[None, :] <= q_pos[:, None], enable_gqa=gqa)
    return z.transpose(1, 2)
