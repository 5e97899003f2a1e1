"""Full causal attention (the baseline), on PyTorch's fused scaled_dot_product_attention."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def full_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_start: int, k_start: int) -> torch.Tensor:
    """q: [B, T, H, hd] at positions q_start..; k, v: [B, Tk, Hkv, hd] at positions k_start.. -> [B, T, H, hd]."""
    heads, kv_heads = q.shape[2], k.shape[2]
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if kv_heads != heads:
        kt = kt.repeat_interleave(heads // kv_heads, dim=1)
        vt = vt.repeat_interleave(heads // kv_heads, dim=1)
    if q_start == k_start and q.shape[1] == k.shape[1]:
        z = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True)
    else:
        q_pos = torch.arange(q_start, q_start + q.shape[1], device=q.device)
        k_pos = torch.arange(k_start, k_start + k.shape[1], device=q.device)
        z = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=k_pos[None, :] <= q_pos[:, None])
    return z.transpose(1, 2)
