"""Near-equiangular token embeddings: ``|x·x' - kappa - 1{x = x'}| <= eps`` for all pairs.

Construction (``d >= N + 1``): ``x_n = sqrt(kappa) u + e_n`` with ``u, e_1, ..., e_N`` orthonormal
(the first ``N + 1`` coordinate axes), which is exact (``eps = 0``). For ``eps > 0`` every row is
moved by a random vector of norm ``delta`` with ``2 sqrt(1 + kappa) delta + delta**2 = eps``, so no
inner product moves by more than ``eps``. For ``d <= N`` there is no exact construction; the
orthonormal rows are replaced by random unit vectors orthogonal to ``u`` and the bound only holds
if ``d`` is large enough. In every case the achieved deviation is measured and a bound that does
not hold raises ``ValueError``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class EmbeddingGeometry:
    """Token embeddings with the equiangular bound they were built for and the one they meet.

    Attributes:
        embeddings: ``[N, d]`` float64.
        kappa: the shared inner product of distinct tokens.
        eps: the requested bound.
        max_deviation: ``max |x·x' - kappa - 1{x = x'}|`` over all pairs, measured.
    """

    embeddings: torch.Tensor
    kappa: float
    eps: float
    max_deviation: float

    def summary(self) -> dict:
        """JSON-serialisable description (no tensors)."""
        n_tokens, dim = self.embeddings.shape
        return {
            "n_tokens": n_tokens,
            "dim": dim,
            "kappa": self.kappa,
            "eps": self.eps,
            "max_deviation": self.max_deviation,
        }


def equiangular_deviation(embeddings: torch.Tensor, kappa: float) -> float:
    """``max |x·x' - kappa - 1{x = x'}|`` over all pairs of rows of ``embeddings`` ``[N, d]``."""
    gram = embeddings @ embeddings.T
    target = kappa + torch.eye(len(embeddings), dtype=gram.dtype)
    return float((gram - target).abs().max())


def near_equiangular_embeddings(
    n_tokens: int, dim: int, kappa: float, eps: float = 0.0, seed: int = 0
) -> EmbeddingGeometry:
    """``N = n_tokens`` embeddings in ``R^dim`` meeting ``|x·x' - kappa - 1{x=x'}| <= eps``.

    Args:
        n_tokens: vocabulary size ``N``.
        dim: embedding dimension ``d``; ``d >= N + 1`` gives an exact construction.
        kappa: shared component, ``>= 0``.
        eps: allowed deviation, ``>= 0``.
        seed: seeds the perturbation (and the random rows when ``d <= N``).

    Returns:
        The embeddings (float64) with their measured deviation.

    Raises:
        ValueError: if the measured deviation exceeds ``eps`` (up to float64 rounding).
    """
    if kappa < 0 or eps < 0:
        raise ValueError("kappa and eps must be non-negative")
    generator = torch.Generator().manual_seed(seed)
    shared = torch.zeros(dim, dtype=torch.float64)
    shared[0] = 1.0
    if dim >= n_tokens + 1:
        distinct = torch.zeros(n_tokens, dim, dtype=torch.float64)
        distinct[:, 1 : n_tokens + 1] = torch.eye(n_tokens, dtype=torch.float64)
    else:
        distinct = torch.randn(n_tokens, dim, generator=generator, dtype=torch.float64)
        distinct[:, 0] = 0.0
        distinct = distinct / distinct.norm(dim=1, keepdim=True)
    embeddings = math.sqrt(kappa) * shared + distinct
    if eps > 0:
        delta = math.sqrt(1 + kappa + eps) - math.sqrt(1 + kappa)
        noise = torch.randn(n_tokens, dim, generator=generator, dtype=torch.float64)
        embeddings = embeddings + delta * noise / noise.norm(dim=1, keepdim=True)
    deviation = equiangular_deviation(embeddings, kappa)
    if deviation > eps + 1e-12:
        raise ValueError(
            f"embeddings reach deviation {deviation:.4g} > eps={eps} (N={n_tokens}, d={dim}); "
            f"use d >= N + 1 for the exact construction"
        )
    return EmbeddingGeometry(embeddings=embeddings, kappa=kappa, eps=eps, max_deviation=deviation)
