"""A Qwen3-style decoder with pluggable (full or chunk-compressed) attention.

Module names follow transformers' Qwen3 (embed_tokens, layers.i.self_attn.q_proj, ...), so a Qwen3
state dict maps onto this model by dropping its "model." prefix.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from ..attention import Attention, LayerState
from ..attention.dsv4_layer import DSV4Attention
from ..config import ModelConfig
from ..hooks import HookPoint
from ..norm import RMSNorm


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    """Pre-norm block. Hook points: hook_attn_out, hook_mlp_out ([B, T, d_model])."""

    def __init__(self, cfg: ModelConfig, layer: int = 0):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = DSV4Attention(cfg, layer) if cfg.dsv4 is not None else Attention(cfg, layer)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)
        self.hook_attn_out = HookPoint()
        self.hook_mlp_out = HookPoint()

    def forward(self, x: torch.Tensor, start: int = 0, state: LayerState | None = None) -> torch.Tensor:
        x = x + self.hook_attn_out(self.self_attn(self.input_layernorm(x), start, state))
        return x + self.hook_mlp_out(self.mlp(self.post_attention_layernorm(x)))


class PhaseKVModel(nn.Module):
    """Causal LM. forward(input_ids [B, T], cache=None) -> logits [B, T, vocab].

    With a `KVCache` (phasekv.cache), the call continues the sequence the cache holds and updates it.
    With `positions` [B, K] (no cache), returns only the logits at those positions, [B, K, vocab]
    (`forward_at`): the scoring fast path.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.reset_parameters()
        if cfg.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    @torch.no_grad()
    def reset_parameters(self) -> None:
        std = self.config.init_std
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=std)
            elif isinstance(module, RMSNorm):
                nn.init.ones_(module.weight)
            elif isinstance(module, Attention) and module.compressor is not None:
                module.compressor.reset_parameters(std)
            elif isinstance(module, DSV4Attention):
                module.reset_parameters(std)

    @contextmanager
    def window_offset(self, offset: int) -> Iterator[None]:
        """Within the block, every compressed layer's windows start at `offset` (window j covers
        offset+j*S ..) instead of its configured offset; the configured ones return on exit. For
        whole calls (a training step): a cache filled under one offset must be continued under it."""
        comp = self.config.compression
        if comp is None:
            raise ValueError("window_offset needs a compressed model; this one has full attention")
        if self.config.dsv4 is not None:
            raise ValueError("window_offset is not supported for DeepSeek-V4 layers (their indexer has windows too)")
        if not (isinstance(offset, int) and 0 <= offset < comp.stride):
            raise ValueError(f"window offset must be an integer in [0, stride={comp.stride}), got {offset!r}")
        compressors = [layer.self_attn.compressor for layer in self.layers]
        configured = [c.geometry for c in compressors]
        try:
            for c in compressors:
                c.geometry = replace(c.geometry, offset=offset)
            yield
        finally:
            for c, geometry in zip(compressors, configured, strict=True):
                c.geometry = geometry

    @contextmanager
    def dense_indexer(self) -> Iterator[None]:
        """Within the block, every CSA layer reads all visible entries instead of the indexer's top-k,
        while its indexer still scores them and (in training) learns from the KL to that dense attention:
        DeepSeek-V3.2's dense warm-up of the indexer, so that top-k starts from picks that mean something."""
        layers = [layer.self_attn for layer in self.layers if getattr(layer.self_attn, "indexer", None) is not None]
        if not layers:
            raise ValueError("dense_indexer needs DeepSeek-V4 CSA layers (a lightning indexer); this model has none")
        try:
            for attn in layers:
                attn.dense = True
            yield
        finally:
            for attn in layers:
                attn.dense = False

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())  # tied weights are counted once

    def forward(self, input_ids: torch.Tensor, cache=None, *, positions: torch.Tensor | None = None) -> torch.Tensor:
        if positions is not None:
            if cache is not None:
                raise ValueError("positions= is a cache-free scoring path; pass either a cache or positions")
            return self.forward_at(input_ids, positions)
        start = 0 if cache is None else cache.position
        x = self.embed_tokens(input_ids)
        for i, layer in enumerate(self.layers):
            x = layer(x, start, None if cache is None else cache.layers[i])
        if cache is not None:
            cache.position += input_ids.shape[1]
        return self.lm_head(self.norm(x))

    def forward_at(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Logits [B, K, vocab] at `positions` [B, K] (row-wise indices into input_ids [B, T]).

        Equal to `self(input_ids)` gathered at `positions` (up to float rounding), but computes only
        what those logits need: tokens after the largest position are dropped (causality), and the
        last layer runs its queries, output projection and MLP only from the smallest position
        `first` on. Its keys, values and compressed entries of positions < first are built into a
        `LayerState` (`Attention.prefill_state`), and the layer's own incremental path (the one the KV cache
        uses) attends over them. Hook points of the last layer see positions first.. only.
        """
        if positions.dim() != 2 or positions.shape[0] != input_ids.shape[0]:
            raise ValueError(
                f"positions must be [B, K] for input_ids {tuple(input_ids.shape)}, got {tuple(positions.shape)}"
            )
        if positions.numel() == 0:
            raise ValueError("positions is empty")
        last, first = int(positions.max()), int(positions.min())
        if first < 0 or last >= input_ids.shape[1]:
            raise ValueError(f"positions must lie in [0, {input_ids.shape[1]}), got {first}..{last}")
        x = self.embed_tokens(input_ids[:, : last + 1])
        for layer in self.layers[:-1]:
            x = layer(x, 0)
        final = self.layers[-1]
        if first == 0:
            x = final(x, 0)
        else:
            h = final.input_layernorm(x[:, :first])
            state = final.self_attn.prefill_state(h)
            tail = x[:, first:]
            x = tail + final.hook_attn_out(final.self_attn(final.input_layernorm(tail), first, state))
            x = x + final.hook_mlp_out(final.mlp(final.post_attention_layernorm(x)))
        x = x.gather(1, (positions - first)[..., None].expand(-1, -1, x.shape[-1]))
        return self.lm_head(self.norm(x))
