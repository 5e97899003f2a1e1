"""Issue #9's training-time mitigations: the static-concentration regulariser and random window offsets.

Static concentration: trained W8/S8 gates put their weight on one offset in every window (a low
*static* effective number exp(H(E[alpha]))), so content at the other offsets is lost. The penalty

    static_concentration = mean over compressed layers, gate branches (key, value), KV heads and
                           channels (vector gates) of  log W - H(E[alpha])

with E[alpha] the gate weights averaged over the batch and the windows, is log W for a gate fixed on
one offset and 0 for a gate whose average is uniform; a gate may still concentrate in each window as
long as *which* offset it picks varies. The trainer adds static_concentration_weight times it to the
loss of each micro-batch (E[alpha] is taken over the micro-batch).

Random window offset: each training step runs with every compressed layer's windows at one offset
drawn from (run seed, step) alone (`step_offset`), so resuming draws the same offsets.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch
from torch import nn

from phasekv.hooks import hooks
from phasekv.train.gates import gate_hooks

_OFFSET_STREAM = 0x0FF5E7  # separates the offset stream from other generators seeded by the run seed


@contextmanager
def capture_gates(model: nn.Module) -> Iterator[list[torch.Tensor]]:
    """The gate weights alpha [B, n, W, kv_heads, g] of every gate hook that fires in the block, with their
    autograd graph (`phasekv.hooks.capture` detaches). `model` is the plain (unwrapped) model."""
    store: list[torch.Tensor] = []
    with hooks(model, {name: lambda alpha, _name: store.append(alpha) for name in gate_hooks(model)}):
        yield store


def static_concentration(alphas: list[torch.Tensor]) -> torch.Tensor:
    """Mean of log W - H(E[alpha]) over the gates (layers x branches), KV heads and channels; a 0-dim float32
    tensor (0 when no gate saw a window). alphas: [B, n, W, kv_heads, g] each."""
    gaps = []
    for alpha in alphas:
        if alpha.shape[1] == 0:  # a sequence shorter than one window
            continue
        mean = alpha.float().mean(dim=(0, 1))  # [W, kv, g]
        entropy = -(mean * mean.clamp_min(1e-30).log()).sum(dim=0)  # [kv, g]
        gaps.append((math.log(alpha.shape[2]) - entropy).mean())
    return torch.stack(gaps).mean() if gaps else torch.zeros(())


def step_offset(seed: int, step: int, stride: int) -> int:
    """The window offset of training step `step`: uniform on [0, stride), a function of (seed, step) only
    (no global generator is read or advanced)."""
    return int(np.random.default_rng([seed, step, _OFFSET_STREAM]).integers(stride))
