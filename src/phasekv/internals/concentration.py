"""Effective numbers of offsets: how concentrated a gate is, statically and per window.

A gate writes one distribution ``alpha`` over the ``W`` offsets of each window. Stack them as a
tensor whose ``dim`` axis holds the offsets and whose *window* axes enumerate windows (and, if you
like, prompts): the usual layout is ``[..., windows, W]`` with ``dim=-1`` and ``window_dims=(-2,)``.
Every other axis (heads, layers, ...) is kept in the result.

With ``H`` the Shannon entropy (natural log, ``0 log 0 = 0``) the paper defines

* static effective number      ``exp(H(E[alpha]))``  -- average the windows first, then measure;
* per-window effective number  ``E[exp(H(alpha))]``  -- measure each window, then average.

Both run from 1 (one-hot) to ``W`` (uniform). A gate that puts the same weights in every window
has equal values; a gate that is one-hot on a different offset in every window has per-window 1
but static up to ``W``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch


def gate_shares(alpha: torch.Tensor, dim: int, gate_norm: str = "softmax") -> torch.Tensor:
    """Each window's gate weights as shares of its total along the offset axis `dim`.

    Softmax gates already sum to 1 (returned as they are). Sigmoid gates do not: what the effective numbers
    and the per-offset means compare with a uniform 1/W is the share of the entry each offset gets, so their
    weights are divided by their sum (a window whose gates are all closed has no share: 0 everywhere)."""
    if gate_norm == "softmax":
        return alpha
    total = alpha.sum(dim=dim, keepdim=True)
    return torch.where(total > 0, alpha / total.clamp_min(torch.finfo(alpha.dtype).tiny), torch.zeros_like(alpha))


class EffectiveNumbers(NamedTuple):
    """The two effective numbers of one set of gate distributions (tensors of equal shape)."""

    static: torch.Tensor
    per_window: torch.Tensor


def _normalise_dims(ndim: int, dim: int, window_dims: Sequence[int] | None) -> tuple[int, list[int]]:
    """Non-negative offset dim and window dims; ``None`` means every axis except ``dim``."""
    dim = dim % ndim
    if window_dims is None:
        windows = [axis for axis in range(ndim) if axis != dim]
    else:
        windows = sorted({axis % ndim for axis in window_dims})
    if dim in windows:
        raise ValueError(f"offset dim {dim} cannot also be a window dim")
    return dim, windows


def _entropy(p: torch.Tensor, dim: int) -> torch.Tensor:
    """Shannon entropy along ``dim`` (kept as size 1), with ``0 log 0 = 0``."""
    return -torch.special.xlogy(p, p).sum(dim=dim, keepdim=True)


def static_effective_number(
    alpha: torch.Tensor, dim: int = -1, window_dims: Sequence[int] | None = None
) -> torch.Tensor:
    """``exp(H(E[alpha]))``: the effective number of offsets of the window-averaged gate.

    Args:
        alpha: gate distributions, each summing to 1 along ``dim``; e.g. ``[heads, windows, W]``.
        dim: the offset axis.
        window_dims: axes averaged over (the expectation); ``None`` = all axes except ``dim``.

    Returns:
        ``alpha``'s shape with ``dim`` and ``window_dims`` removed (a scalar by default);
        values in ``[1, W]``.
    """
    dim, windows = _normalise_dims(alpha.ndim, dim, window_dims)
    mean = alpha.mean(dim=windows, keepdim=True) if windows else alpha
    effective = torch.exp(_entropy(mean, dim))
    return effective.squeeze(dim=tuple(windows + [dim]))


def per_window_effective_number(
    alpha: torch.Tensor, dim: int = -1, window_dims: Sequence[int] | None = None
) -> torch.Tensor:
    """``E[exp(H(alpha))]``: the average effective number of offsets of single windows.

    Arguments and result shape as in :func:`static_effective_number`.
    """
    dim, windows = _normalise_dims(alpha.ndim, dim, window_dims)
    effective = torch.exp(_entropy(alpha, dim))
    if windows:
        effective = effective.mean(dim=windows, keepdim=True)
    return effective.squeeze(dim=tuple(windows + [dim]))


def effective_numbers(alpha: torch.Tensor, dim: int = -1, window_dims: Sequence[int] | None = None) -> EffectiveNumbers:
    """Both effective numbers of offsets (see the module docstring)."""
    return EffectiveNumbers(
        static=static_effective_number(alpha, dim, window_dims),
        per_window=per_window_effective_number(alpha, dim, window_dims),
    )


def pool_phases(alpha: torch.Tensor, stride: int, dim: int = -1) -> torch.Tensor:
    """Sum the weights of offsets that share a phase: offset ``i`` goes to phase ``i mod stride``.

    Args:
        alpha: ``[..., W, ...]`` with the ``W`` offsets on ``dim``.
        stride: the compression stride ``S``.

    Returns:
        ``alpha`` with ``dim`` resized to ``min(W, S)`` phases (``S`` whenever ``W >= S``),
        still a distribution along ``dim``.
    """
    width = alpha.shape[dim]
    phases = torch.arange(width, device=alpha.device) % stride
    shape = list(alpha.shape)
    shape[dim] = min(width, stride)
    pooled = alpha.new_zeros(shape)
    return pooled.index_add_(dim % alpha.ndim, phases, alpha)


def effective_phases(
    alpha: torch.Tensor, stride: int, dim: int = -1, window_dims: Sequence[int] | None = None
) -> EffectiveNumbers:
    """Effective numbers of *phases* for overlapping windows (``W > S``), each from 1 to ``S``.

    Offsets of the same phase are pooled with :func:`pool_phases` before both numbers are
    computed; for ``W == S`` this equals :func:`effective_numbers`.
    """
    return effective_numbers(pool_phases(alpha, stride, dim), dim, window_dims)
