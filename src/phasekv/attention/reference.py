"""Plain, obviously correct attention: one query at a time, written from the definitions.

Slow (Python loops); used by tests to check the fast paths: the compressed-attention kernels (`dispatch.py`),
DeepSeek-V4's gathered attention and top-k picks, full attention, and whole layers (`reference_attention_layer`),
which `phasekv.model.reference` assembles into a model's float64 twin for `phasekv conformance`.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from ..compress.reference import reference_entries
from .dsv4_indexer import NO_ENTRY
from .dsv4_layer import DSV4Attention, unit_rms
from .layer import Attention
from .state import KVView


def reference_compressed_attention(q: torch.Tensor, q_start: int, kv: KVView) -> torch.Tensor:
    """`compressed_attention`'s z [B, T, H, hd] for q [B, T, H, hd] at positions q_start..: each query at t
    attends to every entry with entry_end <= t and its exact tokens t-L+1..t."""

    def visible(b: int, step: int, t: int) -> list[int]:
        return [j for j in range(kv.entry_end.numel()) if int(kv.entry_end[j]) <= t]

    return _reference_attention(q, q_start, kv, visible)


def reference_gathered_attention(q: torch.Tensor, q_start: int, kv: KVView, picks: torch.Tensor) -> torch.Tensor:
    """`dsv4_layer.gathered_attention`'s z: each query attends to the entries it picked (picks [B, T, k]
    entry rows, NO_ENTRY: none) and its exact tokens t-L+1..t."""

    def picked(b: int, step: int, t: int) -> list[int]:
        return [int(j) for j in picks[b, step] if int(j) != NO_ENTRY]

    return _reference_attention(q, q_start, kv, picked)


def _reference_attention(q, q_start, kv: KVView, entries_of) -> torch.Tensor:
    """One query and head at a time: softmax over [entries_of(b, step, t) || exact tokens t-L+1..t (>= 0)]
    (plus exp(sink) in the denominator), in float64, times the values."""
    batch, length, heads, dim = q.shape
    group = heads // kv.exact_k.shape[2]
    z = torch.zeros_like(q)
    for b in range(batch):
        for step in range(length):
            t = q_start + step
            entries = torch.tensor(entries_of(b, step, t), dtype=torch.long)
            local = torch.arange(max(0, t - kv.local_window + 1), t + 1) - kv.exact_start
            for h in range(heads):
                kvh = h // group
                keys = torch.cat([kv.entry_k[b, entries, kvh], kv.exact_k[b, local, kvh]])  # [n, hd]
                values = torch.cat([kv.entry_v[b, entries, kvh], kv.exact_v[b, local, kvh]])
                logits = keys @ q[b, step, h] / dim**0.5
                if kv.sink is not None:
                    logits = torch.cat([logits, kv.sink[h].reshape(1).to(logits.dtype)])
                weights = torch.softmax(logits.double(), dim=0)[: len(keys)].to(q.dtype)
                z[b, step, h] = weights @ values
    return z


def reference_select_top_k(scores: torch.Tensor, visible: torch.Tensor, k: int) -> list[list[set[int]]]:
    """`dsv4_indexer.select_top_k`'s picks from the definition, one query at a time: per [b][t] the set of
    visible rows with the k highest scores (ties broken towards lower rows)."""
    visible = visible.expand_as(scores)
    picks = []
    for b in range(scores.shape[0]):
        rows = []
        for t in range(scores.shape[1]):
            candidates = [j for j in range(scores.shape[2]) if visible[b, t, j]]
            candidates.sort(key=lambda j, b=b, t=t: (-float(scores[b, t, j]), j))
            rows.append(set(candidates[:k]))
        picks.append(rows)
    return picks


def reference_full_attention(q, k, v, q_start, k_start) -> torch.Tensor:
    """Causal attention, one query at a time. q: [B, T, H, hd]; k, v: [B, Tk, Hkv, hd]."""
    batch, length, heads, dim = q.shape
    group = heads // k.shape[2]
    z = torch.zeros_like(q)
    for step in range(length):
        t = q_start + step
        upto = t - k_start + 1
        for h in range(heads):
            logits = torch.einsum("bd,bkd->bk", q[:, step, h], k[:, :upto, h // group]) / dim**0.5
            z[:, step, h] = torch.einsum("bk,bkd->bd", torch.softmax(logits, dim=-1), v[:, :upto, h // group])
    return z


def reference_attention_layer(attn: Attention | DSV4Attention, x: torch.Tensor) -> torch.Tensor:
    """Any attention layer's output for x [B, T, d_model] at positions 0..T-1, from the definitions."""
    return reference_dsv4_layer(attn, x) if isinstance(attn, DSV4Attention) else reference_layer(attn, x)


def reference_layer(attn: Attention, x: torch.Tensor) -> torch.Tensor:
    """An `Attention` layer's output for x [B, T, d_model] (positions 0..T-1), from the definitions: full
    attention, or entries from `reference_entries`; window j starts at o+j*S (o: the layer's offset),
    is RoPE'd there (or S-W later with "last_stride_start") and is visible from o+j*S+W-1 on. In a
    head-staggered layer (stagger="kv_head") KV head h's windows start at (o + o_h) mod S + j*S, and its
    query heads see its entries alone."""

    cfg, comp = attn.cfg, attn.compressor
    batch, length, _ = x.shape
    positions = torch.arange(length)
    q = attn._rope(attn.q_norm(attn.q_proj(x).view(batch, length, cfg.num_heads, cfg.head_dim)), positions)
    k = attn._rope(attn.k_norm(attn.k_proj(x).view(batch, length, cfg.num_kv_heads, cfg.head_dim)), positions)
    v = attn.v_proj(x).view(batch, length, cfg.num_kv_heads, cfg.head_dim)
    if comp is None:
        return attn.o_proj(reference_full_attention(q, k, v, 0, 0).reshape(batch, length, -1))
    group = cfg.num_heads // cfg.num_kv_heads
    # (KV heads, query heads) that share one grid: all of them, or each KV head with its group when staggered
    parts = [(slice(None), slice(None), None)]
    if cfg.compression.stagger == "kv_head":
        parts = [(slice(h, h + 1), slice(h * group, (h + 1) * group), h) for h in range(cfg.num_kv_heads)]
    z = torch.zeros_like(q)
    for kv_heads, q_heads, head in parts:
        entry_k, entry_v = reference_entries(comp, x, head)  # [B, n, kv, hd]
        geometry = comp.geometry
        if head is not None:
            stride = geometry.stride
            geometry = replace(geometry, offset=(geometry.offset + head * stride // cfg.num_kv_heads) % stride)
        rope_at, ends = _entry_positions(geometry, entry_k.shape[1])
        entry_k = attn._rope(entry_k if comp.normalizes_entries else attn.k_norm(entry_k), rope_at)
        sink = None if attn.sink is None else attn.sink[q_heads]
        kv = KVView(entry_k, entry_v, ends, k[:, :, kv_heads], v[:, :, kv_heads], 0, comp.cfg.local_window, sink)
        z[:, :, q_heads] = reference_compressed_attention(q[:, :, q_heads], 0, kv)
    return attn.o_proj(z.reshape(batch, length, -1))


def reference_dsv4_layer(attn: DSV4Attention, x: torch.Tensor) -> torch.Tensor:
    """A DeepSeek-V4 layer's output for x [B, T, d_model] (positions 0..T-1), from the definitions: the
    entries and the indexer's keys from `reference_entries` (window j RoPE'd at its entry position, visible
    from its last token on), each CSA query's picks from `reference_select_top_k` over the visible entries'
    scores (every visible entry: an HCA layer, or a CSA layer reading densely), the attention one query at
    a time over [picks || exact tokens t-L+1..t] with the sink, the output's rope slice rotated back."""
    cfg = attn.cfg
    batch, length, _ = x.shape
    positions = torch.arange(length)
    q_residual = attn.q_a_norm(attn.q_a_proj(x))
    q = attn.q_b_proj(q_residual).view(batch, length, cfg.num_heads, cfg.head_dim)
    q = attn.rotary(unit_rms(q, cfg.rms_norm_eps), positions)
    kv = attn.rotary(attn.kv_norm(attn.kv_proj(x)).view(batch, length, 1, cfg.head_dim), positions)  # K = V
    entry_k, ends = kv[:, :0], torch.zeros(0, dtype=torch.long)
    if attn.compressor is not None:
        entry_k, _ = reference_entries(attn.compressor, x)  # [B, n, 1, hd]
        rope_at, ends = _entry_positions(attn.compressor.geometry, entry_k.shape[1])
        entry_k = attn.rotary(entry_k, rope_at)
    visible = ends[None, :] <= positions[:, None]  # [T, n]
    if attn.indexer is not None and not attn.dense:
        indexer = attn.indexer
        keys, _ = reference_entries(indexer.compressor, x)  # [B, n, 1, dI]
        keys = indexer.rotary(keys, _entry_positions(indexer.compressor.geometry, keys.shape[1])[0])
        scores = indexer.scores(x, q_residual, positions, keys[:, :, 0])
        reads = reference_select_top_k(scores, visible[None], indexer.top_k)  # [b][t]: a set of entry rows
    else:
        reads = [[{j for j in range(len(ends)) if visible[t, j]} for t in range(length)]] * batch
    view = KVView(entry_k, entry_k, ends, kv, kv, 0, attn.local_window, attn.sinks)
    z = _reference_attention(q, 0, view, lambda b, step, t: sorted(reads[b][step]))
    z = attn.rotary(z, -positions)
    return attn.o_b_proj(attn.o_a_proj(z.reshape(batch, length, attn.o_a_proj.groups, -1)).flatten(2))


def _entry_positions(geometry, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Where the first n written windows' entries are RoPE'd and from which position each is visible: window
    j starts at o+j*S, is RoPE'd there (or W-S later with "last_stride_start") and ends at o+j*S+W-1."""
    starts = geometry.offset + geometry.stride * torch.arange(geometry.first_index, geometry.first_index + n)
    rope_at = starts if geometry.entry_position == "window_start" else starts + geometry.window - geometry.stride
    return rope_at, starts + geometry.window - 1
