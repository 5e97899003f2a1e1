"""What every compressor returns, and how hidden states are cut into windows."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .windows import WindowGeometry


@dataclass
class Entries:
    """Compressed entries of consecutive windows.

    key, value: [B, n, kv_heads, head_dim] (the same tensor when K=V is shared)
    index:      [n] window indices j (entry j covers positions j*S .. j*S+W-1)
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


def cut_windows(x: torch.Tensor, geometry: WindowGeometry, start: int, emit_from: int) -> Windows:
    """Cut per-token features into the windows whose last position lies in [emit_from, start + T).

    x: [B, T, F], the features of positions start .. start+T-1. Every needed window must begin at or
    after `start`, except windows before position 0 when `start == 0` and the geometry pads them.
    """
    batch, length, feat = x.shape
    js = geometry.windows_ending_in(emit_from, start + length)
    if len(js) == 0:
        empty = torch.zeros(0, dtype=torch.long, device=x.device)
        return Windows(x.new_zeros(batch, 0, geometry.window, feat), empty.new_ones(0, geometry.window).bool(), empty)
    index = torch.arange(js.start, js.stop, device=x.device)
    pad = -js.start * geometry.stride if (start == 0 and js.start < 0) else 0
    first_row = js.start * geometry.stride - start + pad
    if first_row < 0:
        raise ValueError(
            f"window {js.start} starts at position {js.start * geometry.stride}, before the features given "
            f"(which start at {start}); pass the last window-1 hidden states along"
        )
    if pad:
        x = F.pad(x, (0, 0, pad, 0))
    span = (len(js) - 1) * geometry.stride + geometry.window
    windows = x[:, first_row : first_row + span].unfold(1, geometry.window, geometry.stride)  # [B, n, F, W]
    positions = index[:, None] * geometry.stride + torch.arange(geometry.window, device=x.device)
    return Windows(windows.transpose(2, 3), positions >= 0, index)
