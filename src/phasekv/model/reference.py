"""A phasekv model's float64 naive twin: the same weights, every attention layer computed from its definitions
(`attention.reference`: entries by a loop over windows and offsets, visibility and top-k picks one query at a
time) instead of by the fast paths. It shares the projections, norms and MLPs with the model, none of the code
that places windows, writes entries or decides what a query reads, so it sees a phase bug that every execution
mode of the model shares. Whole sequences from position 0 only (no cache): it is a reference, not a runtime."""

from __future__ import annotations

import copy

import torch
from torch import nn

from ..attention.reference import reference_attention_layer
from .transformer import PhaseKVModel


class ReferenceAttention(nn.Module):
    """An attention layer computed by `reference_attention_layer`."""

    def __init__(self, attn: nn.Module):
        super().__init__()
        self.attn = attn

    def forward(self, x: torch.Tensor, start: int = 0, state=None) -> torch.Tensor:
        if start != 0 or state is not None:
            raise ValueError("the reference twin runs whole sequences from position 0, without a cache")
        return reference_attention_layer(self.attn, x)


def reference_twin(model: PhaseKVModel) -> PhaseKVModel:
    """A float64 copy of `model` (eval mode) whose attention layers run their plain references."""
    twin = copy.deepcopy(model).to(torch.float64).eval()
    for block in twin.layers:
        block.self_attn = ReferenceAttention(block.self_attn)
    return twin
