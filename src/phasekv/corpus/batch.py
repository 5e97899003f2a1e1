"""The unit of training data: a batch of token sequences with a loss mask, and the source protocol.

Every source is *counter-based*: the sequences of global batch `position` are a pure function of
(source seed, split, position, sequence index). Resuming only needs the position, every data-parallel
rank can draw just its own slice of the global batch, and all models of a run see the same data.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch


@dataclass(frozen=True)
class Batch:
    """`tokens` [B, T+1] int64 and `loss_mask` [B, T+1] bool (True where the *token* is scored).

    The model reads `inputs` (tokens 0..T-1) and predicts `targets` (tokens 1..T) where `target_mask`
    is set, so a token is scored exactly when loss_mask marks it.
    """

    tokens: torch.Tensor
    loss_mask: torch.Tensor

    @property
    def inputs(self) -> torch.Tensor:
        """[B, T] model input ids."""
        return self.tokens[:, :-1]

    @property
    def targets(self) -> torch.Tensor:
        """[B, T] next-token ids."""
        return self.tokens[:, 1:]

    @property
    def target_mask(self) -> torch.Tensor:
        """[B, T] bool: which targets count in the loss."""
        return self.loss_mask[:, 1:]

    def to(self, device: torch.device | str) -> Batch:
        return Batch(self.tokens.to(device), self.loss_mask.to(device))

    @classmethod
    def from_numpy(cls, tokens: np.ndarray, loss_mask: np.ndarray) -> Batch:
        return cls(torch.from_numpy(tokens.astype(np.int64)), torch.from_numpy(loss_mask.astype(bool)))


class DataSource(Protocol):
    """What the trainer needs from a data source."""

    vocab_size: int

    def batch(self, split: str, position: int, indices: range) -> Batch:
        """Sequences `indices` of global batch `position` of `split` ("train" or "val")."""
        ...

    def describe(self) -> dict:
        """A JSON-serialisable description (kind, sizes, options) for run records."""
        ...


SPLITS = ("train", "val")


def split_index(split: str) -> int:
    """Index of `split` in SPLITS (a stream key); raises ValueError for unknown splits."""
    if split not in SPLITS:
        raise ValueError(f"unknown data split {split!r}; choose one of {SPLITS}")
    return SPLITS.index(split)
