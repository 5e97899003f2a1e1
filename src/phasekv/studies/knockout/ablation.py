"""KV-head knockouts by mean replacement at the final position.

At the final position T_x of prompt x, the outputs z (before the output projection) of the query
heads that read KV head h in layer l are replaced by their mean over a calibration set; nothing else
changes. The prompt prefix is computed once into a KV cache; each knockout then reruns only the final
token from a fork of that cache, so a model with many heads costs one prefill plus one token per head.
`knockout_logits_reference` does the same with full forward passes, as the plain check.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from phasekv.cache import KVCache
from phasekv.cache.generate import prefill
from phasekv.hooks import capture, hooks


def kv_heads(model) -> list[tuple[int, int]]:
    """Every (layer, KV head) of the model."""
    return [(layer, head) for layer in range(len(model.layers)) for head in range(model.config.num_kv_heads)]


def _query_heads(model, kv_head: int) -> slice:
    group = model.config.num_heads // model.config.num_kv_heads
    return slice(kv_head * group, (kv_head + 1) * group)


def final_position_means(model, calibration: Iterable[torch.Tensor]) -> torch.Tensor:
    """Mean per-head output z at the final position over calibration batches: [layers, heads, head_dim]."""
    with torch.no_grad():  # not a decorator: mutmut leaves decorated functions unmutated
        names = [f"layers.{i}.self_attn.hook_z" for i in range(len(model.layers))]
        total, count = None, 0
        for ids in calibration:
            with capture(model, names) as seen:
                model(ids)
            z = torch.stack([seen[name][0][:, -1] for name in names], dim=1)  # [B, layers, H, hd]
            total = z.sum(0) if total is None else total + z.sum(0)
            count += z.shape[0]
        if not count:
            raise ValueError("the calibration set is empty: the mean to replace with needs at least one prompt")
        return total / count


def _replace_final(model, means: torch.Tensor, layer: int, kv_head: int):
    heads = _query_heads(model, kv_head)

    def replace(z: torch.Tensor, _name: str) -> torch.Tensor:
        z = z.clone()
        z[:, -1, heads] = means[layer, heads]  # z: [B, T, H, hd]
        return z

    return {f"layers.{layer}.self_attn.hook_z": replace}


def knockout_logits(
    model, ids: torch.Tensor, means: torch.Tensor, targets: list[tuple[int, int]] | None = None
) -> tuple[torch.Tensor, dict[tuple[int, int], torch.Tensor]]:
    """ids: [B, T] prompts of one length -> (clean logits [B, V], {(layer, kv_head): logits [B, V]})
    at the final position."""
    with torch.no_grad():  # not a decorator: mutmut leaves decorated functions unmutated
        targets = kv_heads(model) if targets is None else targets
        cache = KVCache.for_model(model)
        if ids.shape[1] > 1:
            prefill(model, ids[:, :-1], cache)
        last = ids[:, -1:]
        clean = model(last, cache.fork())[:, -1]
        knocked = {}
        for layer, head in targets:
            with hooks(model, _replace_final(model, means, layer, head)):
                knocked[(layer, head)] = model(last, cache.fork())[:, -1]
        return clean, knocked


def knockout_logits_reference(model, ids: torch.Tensor, means: torch.Tensor, layer: int, kv_head: int) -> torch.Tensor:
    """The same knockout with one full forward pass (no cache): final-position logits [B, V]."""
    with torch.no_grad():  # not a decorator: mutmut leaves decorated functions unmutated
        with hooks(model, _replace_final(model, means, layer, kv_head)):
            return model(ids)[:, -1]
