"""phasekv's training-free chunked compression for any HF causal LM: "what would W/S chunked pooling
do to my model", without kvpress and without training.

Every attention layer's query at position t attends, in one softmax, to
- the pooled entries of the complete windows: window j covers positions o+jS .. o+jS+W-1 (o, the grid
  offset, is 0 unless the grid-shift test moves it; positions before o belong to no window) and becomes one
  entry, the mean of its W keys and the mean of its W values (the paper's uniform gate, alpha = 1/W,
  applied to the model's own keys and values); the entry is visible iff t >= o+jS+W-1
  (`compress.windows.WindowGeometry`, phasekv's semantics);
- the exact tokens of its local window t-L+1 .. t (own token included). Entries overlapping the local
  window are kept, as in phasekv's models.

RoPE: HF layers hand the attention function keys after RoPE, which is what an HF KV cache stores, so
the pooled key is the mean of the *rotated* keys of its window (each at its own position): exactly
what a training-free cache that pools its stored entries would hold. No re-rotation is applied.

`pooled_attention` is the fast path (one masked softmax over [entries || tokens], [B, H, T, J+T]);
`pooled_attention_reference` is a plain per-query loop in float64 that it is tested against. Both
score whole sequences in one forward (no KV cache), as `HFScorer` does.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from ..compress.windows import WindowGeometry
from .base import ScorerError
from .hf_scorer import HFScorer
from .press_pool import PoolSpec


def _window_index(spec: PoolSpec, length: int, offset: int = 0) -> torch.Tensor:
    """[J, W] positions of the complete windows within 0..length-1 (window j starts at offset + jS)."""
    geometry = WindowGeometry(spec.window, spec.stride, offset=offset)
    starts = geometry.window_start(torch.arange(geometry.num_complete(length)))
    return starts[:, None] + torch.arange(spec.window)


def _check_shapes(query: torch.Tensor, key: torch.Tensor) -> None:
    if query.shape[2] != key.shape[2]:
        raise ScorerError(
            "pooled attention scores whole sequences in one forward (no KV cache): "
            f"got {query.shape[2]} queries for {key.shape[2]} keys"
        )


def pooled_attention(
    module, query, key, value, attention_mask, scaling, dropout=0.0, *, spec: PoolSpec, offset: int = 0, **kwargs
):
    """HF attention function: query [B, H, T, D], key/value [B, Hkv, T, D] (keys after RoPE) ->
    (output [B, T, H, D], None). `attention_mask` is ignored: causality comes from the entries'
    visibility and the local window (batches are right-padded, so no row sees padding). Windows start at
    `offset` + jS."""
    _check_shapes(query, key)
    length = query.shape[2]
    windows = _window_index(spec, length, offset)  # [J, W]
    keys = torch.cat([key[:, :, windows].mean(-2), key], dim=2)  # [B, Hkv, J+T, D]
    values = torch.cat([value[:, :, windows].mean(-2), value], dim=2)
    groups = query.shape[1] // key.shape[1]
    keys, values = keys.repeat_interleave(groups, dim=1), values.repeat_interleave(groups, dim=1)
    t = torch.arange(length, device=query.device)[:, None]
    entry_visible = t >= windows[:, -1].to(query.device)[None, :]  # [T, J]
    s = torch.arange(length, device=query.device)[None, :]
    local = (s <= t) & (s > t - spec.local)  # [T, T]
    visible = torch.cat([entry_visible, local], dim=1)  # [T, J+T]
    scores = torch.matmul(query, keys.transpose(2, 3)) * scaling
    scores = scores.masked_fill(~visible, float("-inf"))
    weights = torch.softmax(scores, dim=-1, dtype=torch.promote_types(query.dtype, torch.float32)).to(query.dtype)
    return torch.matmul(weights, values).transpose(1, 2).contiguous(), None


def pooled_attention_reference(
    module, query, key, value, attention_mask, scaling, dropout=0.0, *, spec: PoolSpec, offset: int = 0, **kwargs
):
    """The plain reference: for every query position, list its visible entries and local tokens,
    then softmax-attend in float64. Same arguments and result as `pooled_attention`."""
    _check_shapes(query, key)
    batch, heads, length, _ = query.shape
    groups = heads // key.shape[1]
    q, k, v = query.double(), key.double(), value.double()
    out = torch.zeros(batch, length, heads, v.shape[-1], dtype=torch.float64, device=query.device)
    for h in range(heads):
        kv = h // groups
        for t in range(length):
            entries_k, entries_v = [], []
            j = 0
            while offset + j * spec.stride + spec.window - 1 <= t:  # window j is complete at t
                span = slice(offset + j * spec.stride, offset + j * spec.stride + spec.window)
                entries_k.append(k[:, kv, span].mean(1))
                entries_v.append(v[:, kv, span].mean(1))
                j += 1
            for s in range(max(0, t - spec.local + 1), t + 1):
                entries_k.append(k[:, kv, s])
                entries_v.append(v[:, kv, s])
            keys, values = torch.stack(entries_k, 1), torch.stack(entries_v, 1)  # [B, N, D]
            weights = torch.softmax((keys @ q[:, h, t, :, None])[..., 0] * scaling, dim=-1)  # [B, N]
            out[:, t, h] = (weights[..., None] * values).sum(1)
    return out.to(query.dtype), None


def install_pooling(model, spec: PoolSpec, reference: bool = False, offset: int = 0) -> str:
    """Make every attention layer of the HF `model` use chunked pooling with `spec` (windows from `offset`);
    returns the attention implementation's registered name."""
    from transformers import AttentionInterface, AttentionMaskInterface

    if not 0 <= offset < spec.stride:
        raise ValueError(f"the pooling grid's offset must be in [0, stride={spec.stride}), got {offset}")
    function = pooled_attention_reference if reference else pooled_attention
    name = f"phasekv_pool_w{spec.window}_s{spec.stride}_l{spec.local}_o{offset}" + ("_reference" if reference else "")
    AttentionInterface.register(name, functools.partial(function, spec=spec, offset=offset))
    AttentionMaskInterface.register(name, _no_mask)  # the function builds its own visibility
    model.set_attn_implementation(name)
    return name


def _no_mask(*args, **kwargs) -> None:
    return None


class PooledScorer(HFScorer):
    """An HF causal LM whose attention is replaced by chunked pooling (`spec`); its compression stride
    is the pooling stride S, so the probes' period check uses it."""

    def __init__(self, model, tokenizer, *, spec: PoolSpec, **options):
        super().__init__(model, tokenizer, **options)
        self.spec = spec
        self.attn_implementation = install_pooling(self.model, spec)

    @property
    def compression_stride(self) -> int | None:
        return self.spec.stride

    unshifted_grid_offset = 0  # where the grid starts outside `grid_offset`

    @contextmanager
    def grid_offset(self, offset: int) -> Iterator[None]:
        """Within the block the pooling windows start at `offset` + jS (content and positions unchanged):
        the grid-shift test's other grids."""
        self.attn_implementation = install_pooling(self.model, self.spec, offset=offset)
        try:
            yield
        finally:
            self.attn_implementation = install_pooling(self.model, self.spec)

    def describe(self) -> dict:
        return {
            **super().describe(),
            "press": {
                "spec": self.spec.text,
                **self.spec.to_dict(),
                "stride": {"value": self.spec.stride, "source": "pool stride s"},
                "semantics": (
                    "every layer: window j = positions jS..jS+W-1 (from 0) becomes one entry, the mean of its keys "
                    "(after RoPE) and values, visible iff t >= jS+W-1, beside the exact local tokens t-L+1..t; "
                    "the whole prompt is scored this way (no separate uncompressed question)"
                ),
            },
        }
