"""The attention layer: Qwen3-style projections and q/k norms, with full or compressed attention."""

from __future__ import annotations

import torch
from torch import nn

from ..compress import build_compressor
from ..config import ModelConfig
from ..hooks import HookPoint
from ..norm import RMSNorm
from .dispatch import compressed_attention
from .full import full_attention
from .rope import Rotary
from .state import KVView, LayerState, append_rows, keep_last


class Attention(nn.Module):
    """Hook points: hook_z, the per-head outputs [B, T, heads, head_dim] before the output projection
    (read them, or replace them at chosen positions); the compressor's gate and entry hooks."""

    def __init__(self, cfg: ModelConfig, layer: int = 0):
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
        self.compressor = None
        if comp is not None:
            offset = comp.layer_offset(layer, cfg.num_layers)
            self.compressor = build_compressor(d, kv, hd, comp, cfg.rms_norm_eps, offset)
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
        mem = self._memory(x, start, state)
        if self.compressor is None:
            z = full_attention(q, mem.exact_k, mem.exact_v, start, mem.exact_start)
        elif mem.heads:
            z = self._staggered_attention(q, start, mem)
        else:
            z = compressed_attention(q, start, KVView.of(mem, self.compressor.cfg.local_window, self.sink))
        if state is not None:
            vars(state).update(vars(self._trim(mem)))
        z = self.hook_z(z)
        return self.o_proj(z.reshape(batch, length, -1))

    def _staggered_attention(self, q: torch.Tensor, start: int, mem: LayerState) -> torch.Tensor:
        """A head-staggered layer's z: each KV head's entries end at its own positions, so each KV head and its
        group of query heads attend on their own (the same kernels, one call per KV head)."""
        group = q.shape[2] // len(mem.heads)
        parts = []
        for head in range(len(mem.heads)):
            rows = slice(head * group, (head + 1) * group)
            sink = None if self.sink is None else self.sink[rows]
            view = KVView.of_head(mem, head, self.compressor.cfg.local_window, sink)
            parts.append(compressed_attention(q[:, :, rows].contiguous(), start, view))
        return torch.cat(parts, dim=2)

    def prefill_state(self, x: torch.Tensor) -> LayerState:
        """The state a cached call on x (positions 0..T-1) would leave, without its queries or outputs."""
        return self._trim(self._memory(x, 0, None))

    def _memory(self, x: torch.Tensor, start: int, state: LayerState | None) -> LayerState:
        """What queries at positions start.. can read: `state`'s memory extended by x's exact keys and
        values (k_norm and RoPE applied) and by the entries of windows completed within x. A new
        LayerState; `state` is left as it is."""
        batch, length, _ = x.shape
        cfg = self.cfg
        positions = torch.arange(start, start + length, device=x.device)
        k = self._rope(self.k_norm(self.k_proj(x).view(batch, length, cfg.num_kv_heads, cfg.head_dim)), positions)
        v = self.v_proj(x).view(batch, length, cfg.num_kv_heads, cfg.head_dim)
        past = state if state is not None else LayerState()
        mem = LayerState(
            exact_k=append_rows(past.exact_k, k),
            exact_v=append_rows(past.exact_v, v),
            exact_start=start if past.exact_k is None else past.exact_start,
        )
        comp = self.compressor
        if comp is None:
            return mem
        mem.extend_hidden(past, x, start)
        if not comp.staggered:
            self._add_entries(mem, past, start)
            return mem
        pasts = past.heads or tuple(LayerState() for _ in range(cfg.num_kv_heads))
        mem.heads = tuple(LayerState() for _ in pasts)
        for head, (own, before) in enumerate(zip(mem.heads, pasts, strict=True)):
            self._add_entries(own, before, start, mem, head)
        return mem

    def _add_entries(
        self, into: LayerState, past: LayerState, start: int, mem: LayerState | None = None, head: int | None = None
    ) -> None:
        """`past`'s entries followed by those of the windows completed at positions start.. (of every KV head,
        or of `head` on its own grid), keys normalised and RoPE'd, into `into`; the compressor reads the
        hidden states of `mem` (default: `into`)."""
        comp = self.compressor
        mem = into if mem is None else mem
        extra = {} if head is None else {"head": head}
        entries = comp(mem.hidden, mem.hidden_start, emit_from=start, **extra)  # windows completed since `start`
        geometry = comp.head_geometry(head)
        entry_k = entries.key if comp.normalizes_entries else self.k_norm(entries.key)
        into.entry_k = append_rows(past.entry_k, self._rope(entry_k, geometry.rope_position(entries.index)))
        into.entry_v = append_rows(past.entry_v, entries.value)
        device = entries.index.device
        into.entry_end = append_rows(past.entry_end.to(device), geometry.window_end(entries.index), dim=0)

    def _trim(self, mem: LayerState) -> LayerState:
        """Drop what no later query can reach: exact tokens beyond the last L-1, hidden states of
        finished windows (beyond the compressor's context). Full attention keeps everything."""
        comp = self.compressor
        if comp is None:
            return mem
        exact_k, dropped = keep_last(mem.exact_k, comp.cfg.local_window - 1)
        exact_v, _ = keep_last(mem.exact_v, comp.cfg.local_window - 1)
        hidden, hidden_dropped = keep_last(mem.hidden, comp.context)
        return LayerState(
            exact_k=exact_k, exact_v=exact_v, exact_start=mem.exact_start + dropped,
            entry_k=mem.entry_k, entry_v=mem.entry_v, entry_end=mem.entry_end,
            hidden=hidden, hidden_start=mem.hidden_start + hidden_dropped, heads=mem.heads,
        )  # fmt: skip
