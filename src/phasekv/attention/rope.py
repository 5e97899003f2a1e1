"""Rotary position embedding on the trailing `rope_dim` channels of each head.

"half" pairs channel c with c + rope_dim/2 (Qwen, Llama); "interleaved" pairs 2c with 2c+1
(DeepSeek-V4). Angles are computed in float32 from integer positions, so any position (an exact
token's or a compressed entry's) can be rotated without a precomputed table.
"""

from __future__ import annotations

import torch
from torch import nn


class Rotary(nn.Module):
    def __init__(self, rope_dim: int, theta: float, style: str = "half"):
        super().__init__()
        self.rope_dim = rope_dim
        self.style = style
        inv_freq = 1.0 / (theta ** (torch.arange(0, rope_dim, 2, dtype=torch.float32) / rope_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x: [..., T, heads, head_dim]; positions: [T] integer positions -> same shape as x."""
        freqs = positions.to(torch.float32)[:, None] * self.inv_freq  # [T, rope_dim/2]
        if self.style == "half":
            freqs = torch.cat([freqs, freqs], dim=-1)
        else:
            freqs = freqs.repeat_interleave(2, dim=-1)
        cos = freqs.cos()[:, None, :]  # [T, 1, rope_dim]
        sin = freqs.sin()[:, None, :]
        keep, rot = x[..., : x.shape[-1] - self.rope_dim], x[..., x.shape[-1] - self.rope_dim :]
        acc = torch.promote_types(x.dtype, torch.float32)  # a float64 model is not rounded to float32 here
        rotated = (rot.to(acc) * cos + self._rotate(rot).to(acc) * sin).to(x.dtype)
        return torch.cat([keep, rotated], dim=-1) if keep.shape[-1] else rotated

    def _rotate(self, x: torch.Tensor) -> torch.Tensor:
        if self.style == "half":
            x1, x2 = x.chunk(2, dim=-1)
            return torch.cat([-x2, x1], dim=-1)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack([-x2, x1], dim=-1).flatten(-2)
