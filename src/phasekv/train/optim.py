"""AdamW with weight decay on weight matrices only (not on biases, norm gains or sinks)."""

from __future__ import annotations

import torch
from torch import nn

from phasekv.train.config import OptimConfig


def decays(name: str, param: torch.Tensor) -> bool:
    """Weight decay applies to parameters with >= 2 dims that are not biases (e.g. the compressor's
    per-offset gate bias [W, n] is a bias; its per-offset matrices [W, d, n] are matrices)."""
    return param.ndim >= 2 and not name.rsplit(".", 1)[-1].endswith("bias")


def make_optimizer(model: nn.Module, optim: OptimConfig) -> torch.optim.AdamW:
    """AdamW over `model`'s trainable parameters in two groups (decay, no decay); tied weights once."""
    decay, plain = [], []
    for name, param in model.named_parameters():  # shared parameters are listed once
        if param.requires_grad:
            (decay if decays(name, param) else plain).append(param)
    groups = [
        {"params": decay, "weight_decay": optim.weight_decay},
        {"params": plain, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=optim.lr, betas=optim.betas, eps=optim.eps)
