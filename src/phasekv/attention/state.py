"""What one attention layer remembers between incremental calls (the compressed KV cache of a layer)."""

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
    """

    exact_k: torch.Tensor | None = None
    exact_v: torch.Tensor | None = None
    exact_start: int = 0
    entry_k: torch.Tensor | None = None
    entry_v: torch.Tensor | None = None
    entry_end: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.long))
    hidden: torch.Tensor | None = None
    hidden_start: int = 0

    @property
    def num_entries(self) -> int:
        return self.entry_end.numel()

    def nbytes(self) -> int:
        """Bytes of key/value memory held (exact tokens and entries; not the compressor's hidden buffer)."""
        tensors = (self.exact_k, self.exact_v, self.entry_k, self.entry_v)
        return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def keep_last(rows: torch.Tensor, keep: int) -> tuple[torch.Tensor, int]:
    """Keep the last `keep` rows along dim 1; returns (rows, number dropped)."""
    dropped = max(0, rows.shape[1] - keep)
    return rows[:, dropped:], dropped
