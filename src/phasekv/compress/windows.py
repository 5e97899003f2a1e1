"""Window geometry: which windows exist, when their entries become visible, where RoPE puts them.

Window j covers positions o+j*S .. o+j*S+W-1 (o: the layer's window offset, 0 <= o < S; 0 unless
staggered). Its entry is visible to a query at t iff t >= o+j*S+W-1: the token that completes a
window already sees it. Windows that would start before position 0 are written only with
`pad_first` (their missing slots get gate weight 0); without it, tokens before o belong to no
complete window.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..config import CompressionConfig


@dataclass(frozen=True)
class WindowGeometry:
    window: int
    stride: int
    pad_first: bool = False
    entry_position: str = "window_start"
    offset: int = 0

    @classmethod
    def of(cls, cfg: CompressionConfig, offset: int = 0) -> WindowGeometry:
        return cls(cfg.window, cfg.stride, cfg.pad_first_window, cfg.entry_position, offset)

    @property
    def first_index(self) -> int:
        """Index j of the first written window (negative when windows before position 0 are padded)."""
        return -((self.window - 1 + self.offset) // self.stride) if self.pad_first else 0

    def window_start(self, j: int | torch.Tensor) -> int | torch.Tensor:
        return self.offset + j * self.stride

    def window_end(self, j: int | torch.Tensor) -> int | torch.Tensor:
        """Last position of window j: its entry is visible from this position on."""
        return self.window_start(j) + self.window - 1

    def rope_position(self, j: torch.Tensor) -> torch.Tensor:
        if self.entry_position == "window_start":
            return self.window_start(j)
        return self.window_start(j) + self.window - self.stride  # "last_stride_start" (DeepSeek-V4: S*(j+1), W=2S)

    def last_complete(self, length: int) -> int:
        """Index of the last window complete within positions 0..length-1 (may be < first_index)."""
        return (length - self.window - self.offset) // self.stride

    def num_complete(self, length: int) -> int:
        """Entries written for a sequence of `length` tokens."""
        return max(0, self.last_complete(length) - self.first_index + 1)

    def windows_ending_in(self, lo: int, hi: int) -> range:
        """Indices j of written windows whose last position lies in [lo, hi)."""
        j_lo = max(self.first_index, -(-(lo - self.window + 1 - self.offset) // self.stride))  # ceil division
        return range(j_lo, self.last_complete(hi) + 1)
