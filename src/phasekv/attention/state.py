"""What one attention layer remembers between incremental calls (the compressed KV cache of a layer), and
the view of it that the attention kernels read."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class LayerState:
    """Empty until the first call. Shapes: [B, n, kv_heads, head_dim] for keys/values/entries.

    exact_k, exact_v: RoPE'd keys and values of exact tokens from position exact_start on: the last
                      L-1 positions for compressed layers (all a later query can reach), all for full.
    entry_k, entry_v: every compressed entry written so far (keys normalised and RoPE'd).
    entry_end:        [N] position from which each entry is visible.
    hidden:           compressor inputs of the last W-1 positions (the unfinished windows).
    index_k:          [B, n, index_head_dim] the lightning indexer's keys of the entries (DeepSeek-V4 CSA).
    heads:            head-staggered layers (stagger="kv_head"): one state per KV head holding only that head's
                      entries (entry_k, entry_v [B, n_h, 1, head_dim], entry_end [n_h]: each head's windows end
                      at different positions); the layer's own entry fields stay empty.
    """

    exact_k: torch.Tensor | None = None
    exact_v: torch.Tensor | None = None
    exact_start: int = 0
    entry_k: torch.Tensor | None = None
    entry_v: torch.Tensor | None = None
    entry_end: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))
    hidden: torch.Tensor | None = None
    hidden_start: int = 0
    index_k: torch.Tensor | None = None
    heads: tuple[LayerState, ...] = ()

    @property
    def num_entries(self) -> int:
        """Entries held (of every KV head's grid, for a head-staggered layer)."""
        return self.entry_end.numel() + sum(head.num_entries for head in self.heads)

    def extend_hidden(self, past: LayerState, x: torch.Tensor, start: int) -> None:
        """Take `past`'s compressor inputs followed by the rows of x (positions start..) as this state's."""
        self.hidden = append_rows(past.hidden, x)
        self.hidden_start = start if past.hidden is None else past.hidden_start

    def nbytes(self) -> int:
        """Bytes of key/value memory held (exact tokens and entries; not the compressor's hidden buffer)."""
        tensors = (self.exact_k, self.exact_v, self.entry_k, self.entry_v, self.index_k)
        own = sum(t.numel() * t.element_size() for t in tensors if t is not None)
        return own + sum(head.nbytes() for head in self.heads)


@dataclass(frozen=True)
class KVView:
    """What a compressed-attention kernel reads besides its queries q [B, T, H, hd] at positions q_start..:
    one softmax per query at t over [entries j with entry_end[j] <= t  ||  exact tokens t-L+1 .. t (>= 0)],
    plus exp(sink) per head in the denominator. Built once per call (`of`); every kernel and its
    reference take it.

    entry_k, entry_v: [B, N, Hkv, hd]  compressed entries, in window order
    entry_end:        [N]              position from which each entry is visible (non-decreasing)
    exact_k, exact_v: [B, Tk, Hkv, hd] exact tokens at positions exact_start .. exact_start+Tk-1; must hold
                                       every position q_start-L+1 .. q_start+T-1 that is >= 0
    local_window:     L, the exact tokens a query sees (its own included)
    sink:             [H] or None      per-head logit added to each softmax denominator
    """

    entry_k: torch.Tensor
    entry_v: torch.Tensor
    entry_end: torch.Tensor
    exact_k: torch.Tensor
    exact_v: torch.Tensor
    exact_start: int
    local_window: int
    sink: torch.Tensor | None = None

    def __post_init__(self):
        if self.entry_k.shape != self.entry_v.shape or self.exact_k.shape != self.exact_v.shape:
            raise ValueError(
                f"keys and values differ in shape: entries {tuple(self.entry_k.shape)} / {tuple(self.entry_v.shape)}, "
                f"exact tokens {tuple(self.exact_k.shape)} / {tuple(self.exact_v.shape)}"
            )
        if self.entry_end.shape != self.entry_k.shape[1:2]:
            raise ValueError(f"entry_end {tuple(self.entry_end.shape)} must have one position per entry")

    @classmethod
    def of(cls, state: LayerState, local_window: int, sink: torch.Tensor | None = None) -> KVView:
        """The view of a layer's memory. A state without values (K=V layers keep one tensor) reads its keys
        as values; one without entries (sliding-window layers) has none."""
        exact_v = state.exact_k if state.exact_v is None else state.exact_v
        entry_k = state.exact_k[:, :0] if state.entry_k is None else state.entry_k
        entry_v = entry_k if state.entry_v is None else state.entry_v
        return cls(entry_k, entry_v, state.entry_end, state.exact_k, exact_v, state.exact_start, local_window, sink)

    @classmethod
    def of_head(cls, state: LayerState, head: int, local_window: int, sink: torch.Tensor | None = None) -> KVView:
        """The view of KV head `head` of a head-staggered layer's memory: its own entries (`state.heads`) and its
        exact tokens; `sink` is the sink of its query heads."""
        entries = state.heads[head]
        exact_k = state.exact_k[:, :, head : head + 1]
        exact_v = state.exact_v[:, :, head : head + 1]
        entry_k = exact_k[:, :0] if entries.entry_k is None else entries.entry_k
        entry_v = entry_k if entries.entry_v is None else entries.entry_v
        end = entries.entry_end
        return cls(entry_k, entry_v, end, exact_k, exact_v, state.exact_start, local_window, sink)

    def requires_grad(self) -> bool:
        """Whether a tensor of the view needs gradients."""
        tensors = (self.entry_k, self.entry_v, self.exact_k, self.exact_v, self.sink)
        return any(t is not None and t.requires_grad for t in tensors)


def keep_last(rows: torch.Tensor, keep: int) -> tuple[torch.Tensor, int]:
    """Keep the last `keep` rows along dim 1; returns (rows, number dropped).

    A view of `rows`; where `rows` lives in a row buffer of `append_rows` far larger than what is kept
    (after a long prefill chunk), the kept rows move into a small buffer of their own (no gradients
    only), so the large one can be freed and later appends still go in place."""
    dropped = max(0, rows.shape[1] - keep)
    kept = rows[:, dropped:]
    mark = getattr(kept.untyped_storage(), _MARK, None)
    if mark is not None and not torch.is_grad_enabled() and mark[1] > 4 * max(keep, _MIN_ROWS):
        if _writable(kept):
            kept = _fresh(kept, kept.narrow(1, 0, 0), 1, max(keep, _MIN_ROWS))
    return kept, dropped


# Row buffers (decoding): the cache's tensors are views of buffers with spare capacity, so that one
# decoding step appends its rows in place instead of copying the whole cache (`torch.cat`). The buffer's
# storage carries (dim, capacity, rows used); only a view that ends at the last used row may append in
# place, so forks (`KVCache.fork`) that share a view never see each other's rows: the first to append
# claims the spare rows, the others copy. Views never change: rows are only ever written past them.
_MARK = "_phasekv_rows"
_MIN_ROWS = 16


def append_rows(old: torch.Tensor | None, new: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """The same as `torch.cat([old, new], dim)` (`new` when `old` is None), without copying `old` when
    it can: with gradients disabled (no_grad / inference_mode) the result is a view of a row buffer
    whose capacity doubles when full, so appending one row per step costs amortised O(1) copies.
    With gradients enabled it is `torch.cat` (in-place writes would bump version counters that
    autograd checks)."""
    if old is None:
        return new
    if torch.is_grad_enabled() or old.dtype != new.dtype or old.device != new.device:
        return torch.cat([old, new], dim)
    n, k = old.shape[dim], new.shape[dim]
    mark = getattr(old.untyped_storage(), _MARK, None)
    if mark is not None and mark[0] == dim and _writable(old) and _same_rows(old, new, dim):
        _, capacity, used = mark
        strides = _strides(old.shape, dim, capacity)
        start, rem = divmod(old.storage_offset(), strides[dim])
        if old.stride() == strides and rem == 0 and start + n == used and used + k <= capacity:
            shape = list(old.shape)
            shape[dim] = capacity
            buffer = old.as_strided(shape, strides, 0)
            buffer.narrow(dim, used, k).copy_(new)
            setattr(old.untyped_storage(), _MARK, (dim, capacity, used + k))
            return buffer.narrow(dim, start, n + k)
    return _fresh(old, new, dim, 2 * (n + k))


def _fresh(old: torch.Tensor, new: torch.Tensor, dim: int, capacity: int) -> torch.Tensor:
    """A new row buffer of `capacity` rows (at least _MIN_ROWS) holding old then new; returns the view."""
    n, k = old.shape[dim], new.shape[dim]
    shape = list(new.shape)
    shape[dim] = max(capacity, n + k, _MIN_ROWS)
    buffer = new.new_empty(shape)
    buffer.narrow(dim, 0, n).copy_(old)
    buffer.narrow(dim, n, k).copy_(new)
    setattr(buffer.untyped_storage(), _MARK, (dim, shape[dim], n + k))
    return buffer.narrow(dim, 0, n + k)


def _same_rows(old: torch.Tensor, new: torch.Tensor, dim: int) -> bool:
    return old.shape[:dim] == new.shape[:dim] and old.shape[dim + 1 :] == new.shape[dim + 1 :]


def _writable(x: torch.Tensor) -> bool:
    """Inference tensors can only be written inside inference_mode."""
    return torch.is_inference_mode_enabled() or not x.is_inference()


def _strides(shape, dim: int, capacity: int) -> tuple[int, ...]:
    """Strides of a contiguous tensor of `shape` with `capacity` rows along dim."""
    sizes = list(shape)
    sizes[dim] = capacity
    strides, step = [], 1
    for size in reversed(sizes):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))
