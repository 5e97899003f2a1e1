"""Whole-layer knockouts for any causal LM: replace a layer's attention output at the query tokens.

For layer l, the attention output (the residual-stream update, [B, T, d_model]) at the last
`n_query` positions is replaced by its mean over calibration prompts; nothing else changes. Works
through forward hooks on

* Hugging Face causal LMs: the attention module of every decoder layer, found generically as
  `model.model.layers[i].self_attn` (or `.attn` / `.attention`); tuple outputs keep their other
  members (Qwen3ForCausalLM, DeepseekV4ForCausalLM, ...);
* phasekv models: the `layers.i.hook_attn_out` hook point.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from ..model import PhaseKVModel

_ATTENTION_NAMES = ("self_attn", "attn", "attention")


def is_phasekv(model: nn.Module) -> bool:
    """True for a phasekv PhaseKVModel (hook points instead of HF modules)."""

    return isinstance(model, PhaseKVModel)


def attention_sites(model: nn.Module) -> list[nn.Module]:
    """One module per layer whose output is that layer's attention output (tensor or tuple)."""
    if is_phasekv(model):
        return [layer.hook_attn_out for layer in model.layers]
    base = getattr(model, "model", model)
    layers = getattr(base, "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise ValueError(f"{type(model).__name__}: no decoder layers found at model.model.layers")
    sites = []
    for i, layer in enumerate(layers):
        name = next((n for n in _ATTENTION_NAMES if isinstance(getattr(layer, n, None), nn.Module)), None)
        if name is None:
            raise ValueError(f"{type(model).__name__}: layer {i} has none of the attention modules {_ATTENTION_NAMES}")
        sites.append(getattr(layer, name))
    return sites


def final_logits(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    """Logits at the final position: ids [B, T] -> [B, V] (phasekv or HF model)."""
    if is_phasekv(model):
        return model(ids)[:, -1]
    return model(input_ids=ids, use_cache=False).logits[:, -1]


def _main(output) -> torch.Tensor:
    return output[0] if isinstance(output, tuple) else output


@contextmanager
def _on_sites(model: nn.Module, fns: dict[int, Callable]) -> Iterator[None]:
    """Forward hooks `fn(attention_output [B, T, d]) -> replacement or None` on the given layers."""
    sites = attention_sites(model)
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
    layers = len(attention_sites(model))
    seen: dict[int, torch.Tensor] = {}
    fns = {i: (lambda out, i=i: seen.__setitem__(i, out[:, -n_query:].float())) for i in range(layers)}
    total, count = None, 0
    for ids in calibration:
        with _on_sites(model, fns):
            final_logits(model, ids)
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


@torch.no_grad()
def layer_knockout_logits(
    model: nn.Module, ids: torch.Tensor, means: torch.Tensor, layers: list[int] | None = None
) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """ids [B, T] prompts of one length, means [layers, n_query, d] ->
    (clean final logits [B, V], {layer: final logits [B, V] with that layer knocked out}).

    One full forward pass per layer: the replaced positions are the last ones, but HF models
    offer no generic cache fork, so the prefix is recomputed."""
    layers = list(range(means.shape[0])) if layers is None else layers
    clean = final_logits(model, ids)
    knocked = {}
    for layer in layers:
        with _on_sites(model, {layer: _replace(means, layer)}):
            knocked[layer] = final_logits(model, ids)
    return clean, knocked
