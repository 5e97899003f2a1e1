"""Learning-rate schedule: linear warm-up, then cosine decay to a floor."""

from __future__ import annotations

import math

from phasekv.train.config import OptimConfig


def learning_rate(step: int, total_steps: int, optim: OptimConfig) -> float:
    """The learning rate of optimiser step `step` (0-based) of `total_steps`.

    Warm-up: lr * (step + 1) / warmup_steps for step < warmup_steps. Then cosine from lr at
    step = warmup_steps down to lr * min_lr_fraction at the last step (total_steps - 1).
    """
    peak, floor = optim.lr, optim.lr * optim.min_lr_fraction
    if step < optim.warmup_steps:
        return peak * (step + 1) / optim.warmup_steps
    decay_steps = total_steps - 1 - optim.warmup_steps
    progress = 0.0 if decay_steps <= 0 else min(1.0, (step - optim.warmup_steps) / decay_steps)
    return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
