"""Plain, obviously correct attention: one query at a time, written from the definitions.

Slow (Python loops); used by tests to check the fast paths: the compressed-attention kernels (`dispatch.py`),
DeepSeek-V4's gathered attention and top-k picks, full attention, and a whole compressed layer.
"""

from __future__ import annotations

import torch

from ..compress.reference import reference_entries
from .dsv4_indexer import NO_ENTRY
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
            entries = entries_of(b, step, t)
            local = [p - kv.exact_start for p in range(max(0, t - kv.local_window + 1), t + 1)]
            for h in range(heads):
                kvh = h // group
                keys = [kv.entry_k[b, j, kvh] for j in entries] + [kv.exact_k[b, r, kvh] for r in local]
                values = [kv.entry_v[b, j, kvh] for j in entries] + [kv.exact_v[b, r, kvh] for r in local]
                logits = torch.stack([q[b, step, h] @ k for k in keys]) / dim**0.5
                if kv.sink is not None:
                    logits = torch.cat([logits, kv.sink[h].reshape(1)])
                weights = torch.softmax(logits.double(), dim=0)[: len(keys)].to(q.dtype)
                z[b, step, h] = sum(w * v for w, v in zip(weights, values, strict=True))
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


def reference_layer(attn, x: torch.Tensor) -> torch.Tensor:
    """A compressed `Attention` layer's output for x [B, T, d_model] (positions 0..T-1), from the
    definitions: entries from `reference_entries`; window j starts at o+j*S (o: the layer's offset),
    is RoPE'd there (or S-W later with "last_stride_start") and is visible from o+j*S+W-1 on. In a
    head-staggered layer (stagger="kv_head") KV head h's windows start at (o + o_h) mod S + j*S, and its
    query heads see its entries alone."""

    cfg, comp = attn.cfg, attn.compressor
    batch, length, _ = x.shape
    positions = torch.arange(length)
    q = attn._rope(attn.q_norm(attn.q_proj(x).view(batch, length, cfg.num_heads, cfg.head_dim)), positions)
    k = attn._rope(attn.k_norm(attn.k_proj(x).view(batch, length, cfg.num_kv_heads, cfg.head_dim)), positions)
    v = attn.v_proj(x).view(batch, length, cfg.num_kv_heads, cfg.head_dim)
    group = cfg.num_heads // cfg.num_kv_heads
    # (KV heads, query heads) that share one grid: all of them, or each KV head with its group when staggered
    parts = [(slice(None), slice(None), None)]
    if cfg.compression.stagger == "kv_head":
        parts = [(slice(h, h + 1), slice(h * group, (h + 1) * group), h) for h in range(cfg.num_kv_heads)]
    z = torch.zeros_like(q)
    for kv_heads, q_heads, head in parts:
        entry_k, entry_v = reference_entries(comp, x, head)  # [B, n, kv, hd]
        offset = comp.geometry.offset
        if head is not None:
            offset = (offset + head * comp.geometry.stride // cfg.num_kv_heads) % comp.geometry.stride
        geometry = comp.geometry
        first = -((geometry.window - 1 + offset) // geometry.stride) if geometry.pad_first else 0
        starts = offset + geometry.stride * torch.arange(first, first + entry_k.shape[1])
        rope_at = starts if geometry.entry_position == "window_start" else starts + geometry.window - geometry.stride
        entry_k = attn._rope(entry_k if comp.normalizes_entries else attn.k_norm(entry_k), rope_at)
        ends = starts + geometry.window - 1
        sink = None if attn.sink is None else attn.sink[q_heads]
        kv = KVView(entry_k, entry_v, ends, k[:, :, kv_heads], v[:, :, kv_heads], 0, comp.cfg.local_window, sink)
        z[:, :, q_heads] = reference_compressed_attention(q[:, :, q_heads], 0, kv)
    return attn.o_proj(z.reshape(batch, length, -1))
