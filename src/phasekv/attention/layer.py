"""The attention layer: Qwen3-style projections and q/k norms, with full or compressed attention."""

from __future__ import annotations

import torch
from torch import nn

from ..compress import build_compressor
from ..config import ModelConfig
from ..hooks import HookPoint
from ..norm import RMSNorm
from .compressed import compressed_attention
from .full import full_attention
from .rope import Rotary
from .state import LayerState, keep_last


class Attention(nn.Module):
    """Hook points: hook_z, the per-head outputs [B, T, heads, head_dim] before the output projection
    (read them, or replace them at chosen positions); the compressor's gate and entry hooks."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        d, h, kv, hd = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.q_proj = nn.Linear(d, h * hd, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(d, kv * hd, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(d, kv * hd, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(h * hd, d, bias=False)
        self.q_norm = RMSNorm(hd, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(hd, cfg.rms_norm_eps)
        self.rotary = Rotary(cfg.rotary_dim, cfg.rope_theta, cfg.rope_style) if cfg.rope else None
        comp = cfg.compression
        self.compressor = build_compressor(d, kv, hd, comp, cfg.rms_norm_eps) if comp is not None else None
        self.sink = nn.Parameter(torch.zeros(h)) if comp is not None and comp.attention_sink else None
        self.hook_z = HookPoint()

    def _rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return x if self.rotary is None else self.rotary(x, positions)

    def forward(self, x: torch.Tensor, start: int = 0, state: LayerState | None = None) -> torch.Tensor:
        """x: [B, T, d_model] (normalised layer input) at positions start..start+T-1 -> [B, T, d_model].

        With `state`, attends to what earlier calls left there and updates it (incremental decoding).
        """
        batch, length, _ = x.shape
        cfg = self.cfg
        positions = torch.arange(start, start + length, device=x.device)
        q = self._rope(self.q_norm(self.q_proj(x).view(batch, length, cfg.num_heads, cfg.head_dim)), positions)
        k = self._rope(self.k_norm(self.k_proj(x).view(batch, length, cfg.num_kv_heads, cfg.head_dim)), positions)
        v = self.v_proj(x).view(batch, length, cfg.num_kv_heads, cfg.head_dim)

        exact_start = start if state is None or state.exact_k is None else state.exact_start
        exact_k = k if state is None or state.exact_k is None else torch.cat([state.exact_k, k], dim=1)
        exact_v = v if state is None or state.exact_v is None else torch.cat([state.exact_v, v], dim=1)

        if self.compressor is None:
            z = full_attention(q, exact_k, exact_v, start, exact_start)
            if state is not None:
                state.exact_k, state.exact_v, state.exact_start = exact_k, exact_v, exact_start
        else:
            z = self._compressed(x, q, exact_k, exact_v, start, exact_start, state)
        z = self.hook_z(z)
        return self.o_proj(z.reshape(batch, length, -1))

    def _compressed(self, x, q, exact_k, exact_v, start, exact_start, state):
        comp = self.compressor
        geometry = comp.geometry
        has_past = state is not None and state.hidden is not None
        hidden = torch.cat([state.hidden, x], dim=1) if has_past else x
        hidden_start = state.hidden_start if has_past else start
        entries = comp(hidden, hidden_start, emit_from=start)  # windows completed inside this call
        entry_k = entries.key if comp.normalizes_entries else self.k_norm(entries.key)
        entry_k = self._rope(entry_k, geometry.rope_position(entries.index))
        entry_v = entries.value
        entry_end = geometry.window_end(entries.index)
        if state is not None and state.entry_k is not None:
            entry_k = torch.cat([state.entry_k, entry_k], dim=1)
            entry_v = torch.cat([state.entry_v, entry_v], dim=1)
            entry_end = torch.cat([state.entry_end, entry_end])
        z = compressed_attention(
            q, start, entry_k, entry_v, entry_end, exact_k, exact_v, exact_start, comp.cfg.local_window, self.sink
        )
        if state is not None:
            keep = comp.cfg.local_window - 1
            state.exact_k, dropped = keep_last(exact_k, keep)
            state.exact_v, _ = keep_last(exact_v, keep)
            state.exact_start = exact_start + dropped
            state.entry_k, state.entry_v, state.entry_end = entry_k, entry_v, entry_end
            state.hidden, dropped = keep_last(hidden, geometry.window - 1)
            state.hidden_start = hidden_start + dropped
        return z
