"""The parameters that Theorems 1 and 2 share: the idealized induction task and its geometry."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InductionConfig:
    """Vocabulary, context layout, heads, scales and embedding geometry (recorded first in every result)."""

    n_tokens: int = 64
    n_chunks: int = 8
    chunk_size: int = 4
    n_heads: int = 2
    gamma: float = 4.0
    beta: float = 4.0
    kappa: float = 0.5
    eps: float = 0.0
    dim: int | None = None  # None: N + 1, the exact construction
