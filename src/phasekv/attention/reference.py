"""Plain, obviously correct attention: one query at a time, written from the definitions.

Slow (Python loops); used by tests to check the fast paths.
"""

from __future__ import annotations

import torch


def reference_compressed_attention(
    q, q_start, entry_k, entry_v, entry_end, exact_k, exact_v, exact_start, local_window, sink=None
) -> torch.Tensor:
    """Same arguments and result as `compressed_attention`."""
    batch, length, heads, dim = q.shape
    group = heads // exact_k.shape[2]
    z = torch.zeros_like(q)
    for b in range(batch):
        for step in range(length):
            t = q_start + step
            entries = [j for j in range(entry_end.numel()) if int(entry_end[j]) <= t]
            local = [p for p in range(max(0, t - local_window + 1), t + 1)]
            for h in range(heads):
                kvh = h // group
                keys = [entry_k[b, j, kvh] for j in entries] + [exact_k[b, p - exact_start, kvh] for p in local]
                values = [entry_v[b, j, kvh] for j in entries] + [exact_v[b, p - exact_start, kvh] for p in local]
                logits = torch.stack([q[b, step, h] @ k for k in keys]) / dim**0.5
                if sink is not None:
                    logits = torch.cat([logits, sink[h].reshape(1)])
                weights = torch.softmax(logits.double(), dim=0)[: len(keys)].to(q.dtype)
                z[b, step, h] = sum(w * v for w, v in zip(weights, values, strict=True))
    return z


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
