"""Training-time mitigations of the weak spots: the static-concentration regulariser and random window offsets.

Static concentration: trained W8/S8 gates put their weight on one offset in every window (a low
*static* effective number exp(H(E[alpha]))), so content at the other offsets is lost. The penalty

    static_concentration = mean over compressed layers, gate branches (key, value), KV heads and
                           channels (vector gates) of  log W - H(E[alpha])

with E[alpha] the gate weights averaged over the batch and the windows, is log W for a gate fixed on
one offset and 0 for a gate whose average is uniform; a gate may still concentrate in each window as
long as *which* offset it picks varies. The trainer adds static_concentration_weight times it to the
loss of each micro-batch (E[alpha] is taken over the micro-batch).

With `concentration_windows="records"` E[alpha] is taken only over the windows that hold a record key (an
animal token of the mixture's task vocabulary): a trained W8/S8 model's failing phases sit in the static
preferences of those windows, which the average over all windows (mostly filler) hides.

Random window offset: each training step runs with every compressed layer's windows at one offset
drawn from (run seed, step) alone (`step_offset`), so resuming draws the same offsets.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from phasekv.compress.windows import WindowGeometry
from phasekv.hooks import hooks
from phasekv.train.gates import gate_hooks

_OFFSET_STREAM = 0x0FF5E7  # separates the offset stream from other generators seeded by the run seed


class GateCapture(NamedTuple):
    alpha: torch.Tensor  # [B, n, W, kv_heads, g] with its autograd graph
    geometry: WindowGeometry  # the windows it scored (the layer's, at the time of the forward)


@contextmanager
def capture_gates(model: nn.Module) -> Iterator[list[GateCapture]]:
    """Every gate hook's weights that fire in the block, with the window geometry they came from
    (`phasekv.hooks.capture` detaches; these keep the graph). `model` is the plain (unwrapped) model."""
    store: list[GateCapture] = []
    calls: dict[str, int] = {}

    def keep(alpha: torch.Tensor, name: str) -> None:
        compressor = model.get_submodule(name.rsplit(".", 1)[0])
        calls[name] = calls.get(name, -1) + 1  # a head-staggered compressor fires once per KV head, in order
        head = calls[name] % compressor.kv_heads if compressor.staggered else None
        store.append(GateCapture(alpha, compressor.head_geometry(head)))

    with hooks(model, {name: keep for name in gate_hooks(model)}):
        yield store


def record_windows(key_mask: torch.Tensor, geometry: WindowGeometry, n_windows: int) -> torch.Tensor:
    """key_mask [B, T] bool (True at record-key tokens) -> [B, n] bool: which of the n windows written from
    position 0 on hold a key token."""
    j = torch.arange(geometry.first_index, geometry.first_index + n_windows, device=key_mask.device)
    slots = geometry.window_start(j)[:, None] + torch.arange(geometry.window, device=key_mask.device)  # [n, W]
    inside = (slots >= 0) & (slots < key_mask.shape[1])
    held = key_mask[:, slots.clamp(0, key_mask.shape[1] - 1)] & inside  # [B, n, W]
    return held.any(dim=2)


def static_concentration(gates: list[GateCapture], key_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean of log W - H(E[alpha]) over the gates (layers x branches), KV heads and channels; a 0-dim float32
    tensor (0 when no gate saw a window). E[alpha] over every window, or with `key_mask` [B, T] only over
    the windows holding a record key (a gate none of whose windows holds one is left out)."""
    gaps = []
    for alpha, geometry in gates:
        if alpha.shape[1] == 0:  # a sequence shorter than one window
            continue
        weights = torch.ones(alpha.shape[:2], device=alpha.device)  # [B, n]
        if key_mask is not None:
            weights = record_windows(key_mask, geometry, alpha.shape[1]).float()
            if not weights.any():
                continue
        w = weights[:, :, None, None, None]
        mean = (alpha.float() * w).sum(dim=(0, 1)) / w.sum()  # [W, kv, g]
        entropy = -(mean * mean.clamp_min(1e-30).log()).sum(dim=0)  # [kv, g]
        gaps.append((math.log(alpha.shape[2]) - entropy).mean())
    return torch.stack(gaps).mean() if gaps else torch.zeros(())


def step_offset(seed: int, step: int, stride: int) -> int:
    """The window offset of training step `step`: uniform on [0, stride), a function of (seed, step) only
    (no global generator is read or advanced)."""
    return int(np.random.default_rng([seed, step, _OFFSET_STREAM]).integers(stride))
