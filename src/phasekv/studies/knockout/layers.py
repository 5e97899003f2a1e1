"""Whole-layer knockouts for any causal LM: replace a layer's attention output at the query tokens.

For layer l, the attention output (the residual-stream update, [B, T, d_model]) at the last
`n_query` positions is replaced by its mean over calibration prompts; nothing else changes. Works
through forward hooks on the model view's attention sites (`phasekv.internals.models`): the attention
module of every decoder layer of a Hugging Face causal LM (tuple outputs keep their other members), the
`layers.i.hook_attn_out` hook point of a phasekv model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from phasekv.internals.models import view


def _main(output) -> torch.Tensor:
    return output[0] if isinstance(output, tuple) else output


@contextmanager
def _on_sites(model: nn.Module, fns: dict[int, Callable]) -> Iterator[None]:
    """Forward hooks `fn(attention_output [B, T, d]) -> replacement or None` on the given layers."""
    sites = view(model).attention_sites()
    handles = []

    def wrap(fn):
        def hook(_module, _inputs, output):
            new = fn(_main(output))
            if new is None:
                return None
            return (new, *output[1:]) if isinstance(output, tuple) else new

        return hook

    try:
        for layer, fn in fns.items():
            handles.append(sites[layer].register_forward_hook(wrap(fn)))
        yield
    finally:
        for handle in handles:
            handle.remove()


@torch.no_grad()
def final_attention_means(model: nn.Module, calibration: Iterable[torch.Tensor], n_query: int = 1) -> torch.Tensor:
    """Mean attention output at the last `n_query` positions over calibration batches:
    [layers, n_query, d_model]."""
    layers = len(view(model).attention_sites())
    seen: dict[int, torch.Tensor] = {}
    fns = {i: (lambda out, i=i: seen.__setitem__(i, out[:, -n_query:].float())) for i in range(layers)}
    total, count = None, 0
    for ids in calibration:
        with _on_sites(model, fns):
            view(model).final_logits(ids)
        batch = torch.stack([seen[i].sum(0) for i in range(layers)])  # [layers, n_query, d]
        total = batch if total is None else total + batch
        count += ids.shape[0]
    if not count:
        raise ValueError("the calibration set is empty: the mean to replace with needs at least one prompt")
    return total / count


def _replace(means: torch.Tensor, layer: int):
    n_query = means.shape[1]

    def replace(out: torch.Tensor) -> torch.Tensor:
        out = out.clone()
        out[:, -n_query:] = means[layer].to(out.dtype)
        return out

    return replace


def knocked_final_logits(model: nn.Module, ids: torch.Tensor, means: torch.Tensor, layer: int | None) -> torch.Tensor:
    """ids [B, T] -> final logits [B, V] with `layer`'s attention output replaced by its mean (None: clean).

    One full forward pass: the replaced positions are the last ones, but HF models offer no generic cache
    fork, so the prefix is recomputed."""
    with torch.no_grad():  # not a decorator: mutmut leaves decorated functions unmutated
        if layer is None:
            return view(model).final_logits(ids)
        with _on_sites(model, {layer: _replace(means, layer)}):
            return view(model).final_logits(ids)
