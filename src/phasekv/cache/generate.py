"""Greedy generation over the compressed cache: prefill (optionally in chunks), then one token a step."""

from __future__ import annotations

import torch

from .kv import KVCache


@torch.no_grad()
def prefill(model, input_ids: torch.Tensor, cache: KVCache, chunk_size: int | None = None) -> torch.Tensor:
    """Feed `input_ids` [B, T] into `cache` (in chunks of `chunk_size` if given); returns logits [B, T, V]."""
    size = input_ids.shape[1] if chunk_size is None else chunk_size
    if size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    return torch.cat([model(input_ids[:, a : a + size], cache) for a in range(0, input_ids.shape[1], size)], dim=1)


@torch.no_grad()
def generate(
    model, input_ids: torch.Tensor, max_new_tokens: int, chunk_size: int | None = None, return_logits: bool = False
):
    """Greedy decoding. input_ids: [B, T] -> tokens [B, T + max_new_tokens] (and the logits of every
    position, [B, T + max_new_tokens - 1, V], when `return_logits`)."""
    if input_ids.shape[1] == 0:
        raise ValueError("generate needs a prompt of at least one token")
    cache = KVCache.for_model(model)
    logits = [prefill(model, input_ids, cache, chunk_size)]
    tokens = [input_ids]
    for step in range(max_new_tokens):
        nxt = logits[-1][:, -1:].argmax(-1)
        tokens.append(nxt)
        if step + 1 < max_new_tokens:
            logits.append(model(nxt, cache))
    out = torch.cat(tokens, dim=1)
    return (out, torch.cat(logits, dim=1)) if return_logits else out
