"""What every compressor returns, and how hidden states are cut into windows."""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from ..config import CompressionConfig
from .windows import WindowGeometry


@dataclass
class Entries:
    """Compressed entries of consecutive windows.

    key, value: [B, n, kv_heads, head_dim] (the same tensor when K=V is shared)
    index:      [n] window indices j (entry j covers positions o+j*S .. o+j*S+W-1, o the window offset)
    """

    key: torch.Tensor
    value: torch.Tensor
    index: torch.Tensor

    def __len__(self) -> int:
        return self.index.numel()


@dataclass
class Windows:
    """Features cut into windows. x: [B, n, W, F]; valid: [n, W] (False for slots before position 0)."""

    x: torch.Tensor
    valid: torch.Tensor
    index: torch.Tensor


def window_rows(geometry: WindowGeometry, length: int, start: int, emit_from: int) -> tuple[range, int]:
    """The windows j whose last position lies in [emit_from, start + length) of features x [B, length, F]
    at positions start.., and the row of x where the first of them begins (negative when it begins before
    position 0: a padded window, possible only when start == 0).

    Every needed window must begin at or after `start`, except windows before position 0 when `start == 0`
    and the geometry pads them."""
    js = geometry.windows_ending_in(emit_from, start + length)
    if len(js) == 0:
        return js, 0
    first = geometry.window_start(js.start)
    if first < start and not (start == 0 and first < 0):
        raise ValueError(
            f"window {js.start} starts at position {first}, before the features given "
            f"(which start at {start}); pass the compressor's `context` hidden states along"
        )
    return js, first - start


def cut_windows(x: torch.Tensor, geometry: WindowGeometry, start: int, emit_from: int) -> Windows:
    """Cut per-token features into the windows whose last position lies in [emit_from, start + T).

    x: [B, T, F], the features of positions start .. start+T-1 (see `window_rows` for what they must cover).
    """
    batch, length, feat = x.shape
    js, first_row = window_rows(geometry, length, start, emit_from)
    if len(js) == 0:
        empty = torch.zeros(0, dtype=torch.long, device=x.device)
        return Windows(x.new_zeros(batch, 0, geometry.window, feat), empty.new_ones(0, geometry.window).bool(), empty)
    index = torch.arange(js.start, js.stop, device=x.device)
    pad = max(0, -first_row)
    if pad:
        x = F.pad(x, (0, 0, pad, 0))
    span = (len(js) - 1) * geometry.stride + geometry.window
    windows = x[:, first_row + pad : first_row + pad + span].unfold(1, geometry.window, geometry.stride)  # [B, n, F, W]
    positions = geometry.window_start(index)[:, None] + torch.arange(geometry.window, device=x.device)
    return Windows(windows.transpose(2, 3), positions >= 0, index)


def join_head_calls(calls: list[torch.Tensor]) -> torch.Tensor:
    """One forward's tensors at a gate or entry hook as one [B, n, ..., kv_heads, g] tensor: the only call of an
    unstaggered compressor, or a head-staggered compressor's calls (one per KV head, kv_heads = 1 each, in head
    order) cut to their common number of windows n (heads with later grids complete a window fewer) and
    joined along the KV-head axis (the second-to-last)."""
    if len(calls) == 1:
        return calls[0]
    n = min(c.shape[1] for c in calls)
    return torch.cat([c[:, :n] for c in calls], dim=-2)


class Compressor(nn.Module):
    """What the compressors share: config, window geometry, and the per-token features they read. Each kind
    subclasses it in its own module, beside its config, and registers both (`phasekv.config.register_kind`).

    in_features: width of those features (2*d_model with token_shift: [h_p ; h_{p-1}]).
    context:     hidden states before a call's new tokens that the call needs (the unfinished
                 windows, plus the token before them with token_shift); the decode cache keeps them.
    head_offsets: each KV head's window offset relative to `geometry`'s (stagger="kv_head"; else all 0).
                 A staggered compressor writes each KV head's entries on its own grid (`head_geometry`),
                 one head per call (`forward(..., head=h)`).
    branches:    1 when keys and values are one latent, else 2 (key, value).
    eps:         the epsilon of the entries' norm, for kinds that normalise their entries.

    A kind also states its formulas plainly for the reference (`phasekv.compress.reference`): `reference_terms`
    (one token's gate logits and payload at one slot) and `reference_entry` (the entry from the gated sum).
    """

    def __init__(
        self, hidden_size: int, kv_heads: int, head_dim: int, cfg: CompressionConfig, offset: int = 0, eps: float = 1e-6
    ):
        super().__init__()
        self.cfg = cfg
        self.geometry = WindowGeometry.of(cfg, offset)
        self.kv_heads, self.head_dim = kv_heads, head_dim
        self.in_features = hidden_size * (2 if cfg.token_shift else 1)
        self.context = cfg.window - 1 + int(cfg.token_shift)
        self.head_offsets = cfg.head_offsets(kv_heads)
        self.branches = 1 if cfg.shared_kv else 2
        self.eps = eps

    def reference_terms(self, x: torch.Tensor, slot: int, branch: int, head: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The gate logits [B, g] and the payload [B, head_dim] of one token's features x [B, in_features] at
        `slot` of a window, for `branch` (0: key, 1: value) and KV head `head`, computed from the kind's formulas."""
        raise NotImplementedError

    def reference_entry(self, pooled: torch.Tensor) -> torch.Tensor:
        """The entry from the gated sum of a window's payloads (the sum itself unless the kind normalises it)."""
        return pooled

    @property
    def staggered(self) -> bool:
        """Whether the KV heads' windows lie on different grids."""
        return any(self.head_offsets)

    def head_geometry(self, head: int | None) -> WindowGeometry:
        """The windows of KV head `head` (None: the layer's, which every head uses unless staggered): the
        layer's grid moved by the head's offset, mod S, so that moving the layer's grid (`window_offset`)
        moves every head's with it."""
        if head is None or not self.head_offsets[head]:
            return self.geometry
        g = self.geometry
        return replace(g, offset=(g.offset + self.head_offsets[head]) % g.stride)

    def features(self, h: torch.Tensor, start: int) -> tuple[torch.Tensor, int]:
        """h: [B, T, d_model] at positions start.. -> (features [B, T', in_features], their first position).

        With token_shift the row of position p is [h_p ; h_{p-1}] (h_{-1} = 0); h's first row has no
        previous token in h unless start == 0, so it is dropped (T' = T - 1)."""
        if not self.cfg.token_shift:
            return h, start
        shifted = torch.cat([h, F.pad(h, (0, 0, 1, 0))[:, :-1]], dim=-1)  # [B, T, 2d]
        return (shifted, 0) if start == 0 else (shifted[:, 1:], start + 1)
