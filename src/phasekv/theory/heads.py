"""Two parameterisations of the coefficient vectors ``p^K, p^V`` of ``m`` heads.

* :class:`FreeCoefficients` -- one free softmax per head, chunk and (optionally) context: the
  unconstrained query-independent rules of Theorem 1.
* :class:`LogLinearGates` -- ``p^B_{h,l}(r) ∝ exp<c^B_{h,r}, x_{l,r}>``, parameters shared
  across inputs: the gates of Theorem 2.

Both return ``(p_key, p_value)``, each ``[B, m, L, S]`` as :mod:`phasekv.theory.model` expects.
"""

from __future__ import annotations

import torch
from torch import nn


class FreeCoefficients(nn.Module):
    """Free softmax-parameterised coefficients ``[B, m, L, S]``, logits drawn from ``N(0, scale^2)``.

    Args:
        shape: ``(B, m, L, S)``; ``B`` independent rule sets (contexts or random starts).
        init_scale: standard deviation of the initial logits.
        generator: seeds the initial logits.
    """

    def __init__(self, shape: tuple[int, int, int, int], init_scale: float, generator: torch.Generator):
        super().__init__()
        self.key_logits = nn.Parameter(init_scale * torch.randn(shape, generator=generator, dtype=torch.float64))
        self.value_logits = nn.Parameter(init_scale * torch.randn(shape, generator=generator, dtype=torch.float64))

    def forward(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(p_key, p_value)``, each ``[B, m, L, S]``."""
        return self.key_logits.softmax(dim=-1), self.value_logits.softmax(dim=-1)


def uniform_in_ball(shape: tuple[int, ...], radius: float, generator: torch.Generator) -> torch.Tensor:
    """Vectors (last axis) drawn uniformly from the ball of ``radius``: ``[*shape]`` float64."""
    directions = torch.randn(shape, generator=generator, dtype=torch.float64)
    directions = directions / directions.norm(dim=-1, keepdim=True)
    radii = radius * torch.rand(shape[:-1] + (1,), generator=generator, dtype=torch.float64) ** (1 / shape[-1])
    return directions * radii


class LogLinearGates(nn.Module):
    """Log-linear gates ``p^B_{h,l}(r) = softmax_r <c^B_{h,r}, x_{l,r}>`` for ``B`` in ``{K, V}``.

    Args:
        n_heads: ``m``.
        chunk_size: ``S``.
        dim: embedding dimension ``d``.
        rho: every ``c^B_{h,r}`` starts uniformly in the ball of radius ``rho`` in ``R^d``.
        generator: seeds the start.
    """

    def __init__(self, n_heads: int, chunk_size: int, dim: int, rho: float, generator: torch.Generator):
        super().__init__()
        self.key_directions = nn.Parameter(uniform_in_ball((n_heads, chunk_size, dim), rho, generator).float())
        self.value_directions = nn.Parameter(uniform_in_ball((n_heads, chunk_size, dim), rho, generator).float())

    def forward(self, chunk_embeddings: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Gates for embedded contexts ``[B, L, S, d]``: ``(p_key, p_value)``, each ``[B, m, L, S]``."""
        key_logits = torch.einsum("msd,blsd->bmls", self.key_directions, chunk_embeddings)
        value_logits = torch.einsum("msd,blsd->bmls", self.value_directions, chunk_embeddings)
        return key_logits.softmax(dim=-1), value_logits.softmax(dim=-1)
