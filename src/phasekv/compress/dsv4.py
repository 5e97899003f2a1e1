"""DeepSeek-V4's CSA and HCA compressors (the compressed part, before the lightning indexer).

CSA: window j (W = 2S) is built from two stride-blocks: its first S slots read the first half of the
per-token projections ("a"), its last S slots the second half ("b"). Only the bias `position_bias`
([S, 2*kv_heads*head_dim], per offset and per channel) depends on the offset; the matrices take one
value per half. The gate is a per-channel softmax over the W slots; keys and values share one latent,
which is RMS-normalised. Given the same weights, the entries equal transformers'
`DeepseekV4CSACompressor` (with pad_first_window and entry_position="last_stride_start").
HCA (W = S): one block, one half, the same gate and norm; equal to `DeepseekV4HCACompressor`
(entry_position="window_start").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from ..config import CompressionConfig, register_kind, require
from ..hooks import HookPoint
from ..norm import RMSNorm
from .base import Compressor, Entries, cut_windows


@dataclass(frozen=True)
class DSV4Compression(CompressionConfig):
    """DeepSeek-V4's compressor (kind "dsv4"): window = 2*stride built from two halves (CSA) or window = stride
    (HCA), a per-offset per-channel bias only, a per-channel softmax gate, one latent read as key and value,
    RMSNorm on the entry. It has no options of its own: its gate and K=V are fixed."""

    kind: ClassVar[str] = "dsv4"
    gate: ClassVar[str] = "vector"
    gate_norm: ClassVar[str] = "softmax"
    shared_kv: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            self.window in (self.stride, 2 * self.stride),
            f"dsv4 compression builds each window from two stride-blocks (CSA: window = 2*stride) or one "
            f"(HCA: window = stride), got window={self.window}, stride={self.stride}",
        )

    def model_defaults(self, head_dim: int) -> dict[str, Any]:
        """DeepSeek-V4 rotates only a trailing slice of each head, pairing channels interleaved."""
        return dict(rope_dim=head_dim // 2, rope_style="interleaved")


class DSV4Compressor(Compressor):
    """Hook points: hook_gate_key: alpha [B, n, W, kv_heads, head_dim]; hook_entry_key: the shared
    entry [B, n, kv_heads, head_dim] (after its RMSNorm)."""

    normalizes_entries = True

    def __init__(
        self, hidden_size: int, kv_heads: int, head_dim: int, cfg: DSV4Compression, offset: int = 0, eps: float = 1e-6
    ):
        super().__init__(hidden_size, kv_heads, head_dim, cfg, offset, eps)
        width = kv_heads * head_dim
        self.halves = cfg.window // cfg.stride  # 2 (CSA) or 1 (HCA)
        self.kv_proj = nn.Linear(self.in_features, self.halves * width, bias=False)  # [a-half | b-half]
        self.gate_proj = nn.Linear(self.in_features, self.halves * width, bias=False)
        self.position_bias = nn.Parameter(torch.empty(cfg.stride, self.halves * width))  # DeepSeek's `ape`
        self.kv_norm = RMSNorm(head_dim, self.eps)
        self.hook_gate_key = HookPoint()
        self.hook_entry_key = HookPoint()

    def reset_parameters(self, std: float) -> None:
        nn.init.normal_(self.kv_proj.weight, std=std)
        nn.init.normal_(self.gate_proj.weight, std=std)
        nn.init.zeros_(self.position_bias)
        nn.init.ones_(self.kv_norm.weight)

    def _slots(self, per_token: torch.Tensor) -> torch.Tensor:
        """[B, n, W, halves*width] windows of per-token features -> [B, n, W, width]: a-half, then b-half."""
        s, width = self.cfg.stride, self.kv_heads * self.head_dim
        if self.halves == 1:
            return per_token
        return torch.cat([per_token[:, :, :s, :width], per_token[:, :, s:, width:]], dim=2)

    def forward(self, h: torch.Tensor, start: int = 0, emit_from: int = 0) -> Entries:
        """h: [B, T, d_model] hidden states of positions start..start+T-1 -> entries of the windows
        ending in [emit_from, start+T)."""
        x, first = self.features(h, start)
        kv = cut_windows(self.kv_proj(x), self.geometry, first, emit_from)
        gate = cut_windows(self.gate_proj(x), self.geometry, first, emit_from)
        batch, n = kv.x.shape[:2]
        width = self.kv_heads * self.head_dim
        bias = torch.cat(self.position_bias.split(width, dim=1), dim=0)  # [W, width]
        logits = self._slots(gate.x) + bias
        logits = logits.masked_fill(~kv.valid[None, :, :, None], float("-inf"))
        acc = torch.promote_types(logits.dtype, torch.float32)  # at least float32; float64 stays float64
        alpha = torch.softmax(logits.to(acc), dim=2).to(h.dtype)  # per channel, over the W slots
        alpha = self.hook_gate_key(alpha.view(batch, n, self.cfg.window, self.kv_heads, self.head_dim))
        latent = (alpha * self._slots(kv.x).view(batch, n, self.cfg.window, self.kv_heads, self.head_dim)).sum(2)
        entry = self.hook_entry_key(self.kv_norm(latent))  # [B, n, kv, hd]
        return Entries(entry, entry, kv.index)

    def reference_terms(self, x: torch.Tensor, slot: int, branch: int, head: int) -> tuple[torch.Tensor, torch.Tensor]:
        """From the formulas: the gate logits [B, head_dim] and the payload [B, head_dim] of one token x [B, d_in]
        at slot i: the window's first half reads the "a" columns, its second half the "b" columns, and the bias
        is the one of offset i mod S."""
        hd, width = self.head_dim, self.kv_heads * self.head_dim
        half = 0 if slot < self.cfg.stride else width
        cols = slice(half + head * hd, half + (head + 1) * hd)
        gate = x @ self.gate_proj.weight[cols].T + self.position_bias[slot % self.cfg.stride, cols]
        return gate, x @ self.kv_proj.weight[cols].T

    def reference_entry(self, pooled: torch.Tensor) -> torch.Tensor:
        """The entry from its pooled latent: RMS-normalised."""
        return self.kv_norm(pooled)


register_kind(DSV4Compression, DSV4Compressor)
