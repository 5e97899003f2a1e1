"""kvpress's chunked presses with their grid moved: the other grids of the grid-shift test.

ChunkKVPress and ChunkPress cut the context into chunks of C tokens from its first token; BlockPress cuts what
follows its first n_kept tokens into blocks of B. A phase effect of such a press belongs to that grid, so moving
the grid while content and positions stay is the causal test. `shifted_press_class(name)` is the kvpress class
with one more field, `grid_offset` o: its cuts fall at o + kC (o + kB after the kept prefix) instead, the first,
partial segment treated exactly as kvpress treats its last, partial one. At o = 0 each class computes what
kvpress computes (tests/studies/presses/test_presses.py compares them), so a shifted run differs from the
unshifted one only where the cuts fall.

`matched_chunkkv_compress` moves ChunkKV's cuts the same way but keeps exactly as many tokens as kvpress's ChunkKV
keeps on the same input (a moved grid has one more, partial segment, so "the same number of chunks" would keep more
tokens at some offsets): the staggered and dithered presses (`press_staggered`, `press_dithered`) select with it,
and `chunkkv_variant` makes their classes.

kvpress is optional: the classes are made on first use.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass, field


def grid_segments(start: int, end: int, size: int, offset: int) -> list[tuple[int, int]]:
    """[(a, b), ...] covering start..end-1 with cuts at start + offset + k*size (k >= 0): a partial first
    segment of `offset` tokens when offset > 0, then whole segments of `size`, then a partial last one."""
    if not 0 <= offset < size:
        raise ValueError(f"grid offset must be in [0, {size}), got {offset}")
    cuts = [start, *range(start + offset if offset else start + size, end, size), end]
    return [(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a]


def _gather(keys, values, indices, head_dim: int):
    """keys/values [B, H, n, D] at `indices` (a sorted 1-D tensor, the same for every row and head, or
    [B, H, k] per head)."""
    if indices.dim() == 1:
        indices = indices.view(1, 1, -1)
    indices = indices.unsqueeze(-1).expand(keys.shape[0], keys.shape[1], -1, head_dim)
    return keys.gather(2, indices).contiguous(), values.gather(2, indices).contiguous()


def _chunkkv_compress(self, module, hidden_states, keys, values, attentions, kwargs):
    """ChunkKVPress with its chunks cut at `grid_offset` + kC: chunks ranked by the mean over their tokens of
    the head-summed scores, the best int(chunks x (1 - ratio)) kept whole (the rows' first sample decides,
    as in kvpress)."""
    import torch

    if self.press.compression_ratio == 0:
        return keys, values
    segments = grid_segments(0, keys.shape[2], self.chunk_length, self.grid_offset)
    if not any(b - a == self.chunk_length for a, b in segments):
        return self.press.compress(module, hidden_states, keys, values, attentions, kwargs)
    summed = self.press.score(module, hidden_states, keys, values, attentions, kwargs).sum(dim=1)  # [B, n]
    chunk_scores = torch.stack([summed[:, a:b].mean(dim=-1) for a, b in segments], dim=-1)  # [B, chunks]
    kept = max(1, int(len(segments) * (1 - self.press.compression_ratio)))
    chosen = chunk_scores.topk(kept, dim=-1).indices[0]
    indices = torch.cat([torch.arange(*segments[int(c)], device=keys.device) for c in chosen]).sort()[0]
    return _gather(keys, values, indices, module.head_dim)


def matched_chunkkv_compress(press, offset: int, module, hidden_states, keys, values, attentions, kwargs):
    """`press` (a ChunkKVPress) with its chunks cut at `offset` + kC, keeping exactly the number of tokens kvpress's
    ChunkKVPress keeps from the same input (its budget: whole chunks, its partial last chunk counted by its length
    when chosen). The moved grid's segments are ranked as ChunkKV ranks its chunks, by the mean over their tokens of
    the head-summed scores (the batch's first row decides, as in kvpress; equal means: the earlier segment first),
    and kept whole in that order while they fit the budget; the first that does not fit is cut to its best-scored
    tokens (equal scores: the earlier token) to fill it, and nothing after it is kept. At offset 0, or where kvpress
    keeps every token or has no whole chunk (it then lets the scorer press choose), this is kvpress's ChunkKVPress."""
    import torch
    from kvpress import ChunkKVPress

    kept = ChunkKVPress.compress(press, module, hidden_states, keys, values, attentions, kwargs)
    length = keys.shape[2]
    if offset == 0 or kept[0].shape[2] == length or length < press.chunk_length:
        return kept
    left = kept[0].shape[2]  # the budget
    summed = press.press.score(module, hidden_states, keys, values, attentions, kwargs).sum(dim=1)[0]  # [n]
    segments = grid_segments(0, length, press.chunk_length, offset)
    means = torch.stack([summed[a:b].mean() for a, b in segments])
    picked = []
    for c in means.sort(descending=True, stable=True).indices.tolist():
        a, b = segments[c]
        if b - a <= left:
            picked.append(torch.arange(a, b, device=keys.device))
        else:
            picked.append(a + summed[a:b].sort(descending=True, stable=True).indices[:left])
        left -= len(picked[-1])
        if left == 0:
            break
    return _gather(keys, values, torch.cat(picked).sort()[0], module.head_dim)


def _chunk_compress(self, module, hidden_states, keys, values, attentions, kwargs):
    """ChunkPress with its chunks cut at `grid_offset` + kC: each chunk keeps its own best
    max(1, int(length x (1 - ratio))) tokens by the inner press's score on that chunk alone."""
    import torch

    if self.press.compression_ratio == 0:
        return keys, values
    picked = []
    for a, b in grid_segments(0, keys.shape[2], self.chunk_length, self.grid_offset):
        scores = self.press.score(
            module, hidden_states[:, a:b], keys[:, :, a:b], values[:, :, a:b], attentions, kwargs
        )  # [B, H, b - a]
        kept = max(1, int((b - a) * (1 - self.press.compression_ratio)))
        picked.append(a + scores.topk(kept, dim=-1).indices)
    return _gather(keys, values, torch.cat(picked, dim=-1), module.head_dim)


def _block_compress(self, module, hidden_states, keys, values, attentions, kwargs):
    """BlockPress with its blocks cut at n_kept + `grid_offset` + kB: the first n_kept tokens are kept, then
    each block in turn is scored together with what is kept so far and the best n_kept survive."""
    import torch
    from kvpress.utils import compute_n_kept

    if self.press.compression_ratio == 0:
        return keys, values
    batch, heads, length, head_dim = keys.shape
    n_kept = compute_n_kept(length, self.compression_ratio)
    kept = torch.arange(n_kept, device=keys.device).expand(batch, heads, -1)
    states = hidden_states.view(batch, length, heads, -1).transpose(1, 2)  # [B, H, n, d_model / H]
    for a, b in grid_segments(n_kept, length, self.block_size, self.grid_offset):
        current = torch.cat([kept, torch.arange(a, b, device=keys.device).expand(batch, heads, -1)], dim=-1)
        current_states = states.gather(2, current.unsqueeze(-1).expand(-1, -1, -1, states.shape[-1]))
        current_states = current_states.transpose(1, 2).reshape(batch, -1, hidden_states.shape[-1])
        index = current.unsqueeze(-1).expand(-1, -1, -1, head_dim)
        scores = self.press.score(
            module, current_states, keys.gather(2, index), values.gather(2, index), attentions, kwargs
        )
        kept = current.gather(-1, scores.topk(n_kept, dim=-1).indices)
    return _gather(keys, values, kept, head_dim)


_COMPRESS = {"ChunkKVPress": _chunkkv_compress, "ChunkPress": _chunk_compress, "BlockPress": _block_compress}


@functools.cache
def shifted_press_class(name: str) -> type:
    """kvpress's `name` press (a key of `press_spec.GRID_FIELDS`) with a `grid_offset` field that moves its grid."""
    import kvpress

    base = getattr(kvpress, name)
    namespace = {"__annotations__": {"grid_offset": int}, "grid_offset": 0, "compress": _COMPRESS[name]}
    return dataclass(type(f"GridShifted{name}", (base,), namespace))


# what the presses that select with `matched_chunkkv_compress` keep, as their grid records say
MATCHED_BUDGET = "exactly the tokens kvpress's ChunkKVPress keeps on the same input, per layer"


def seen_counter() -> Counter:
    """A dataclass field that counts what a press saw (kept out of its repr and equality)."""
    return field(default_factory=Counter, repr=False, compare=False)


def chunkkv_variant(name: str, namespace: dict) -> type:
    """A dataclass subclass `name` of kvpress's ChunkKVPress with `namespace`'s fields and methods."""
    from kvpress import ChunkKVPress

    return dataclass(type(name, (ChunkKVPress,), namespace))
