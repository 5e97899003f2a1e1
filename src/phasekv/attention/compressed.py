"""Joint attention over visible compressed entries and a local window of exact tokens.

One softmax per query over [entries j with j*S+W-1 <= t  ||  exact tokens t-L+1 .. t]
(plus an optional per-head sink logit that only adds to the denominator). Queries are processed in
chunks, so memory is chunk x (visible entries + chunk + L): no T x T tensor is ever built.
`reference.py` holds the plain per-query version this must agree with.
"""

from __future__ import annotations

import torch

NEG_INF = float("-inf")


def compressed_attention(
    q: torch.Tensor,
    q_start: int,
    entry_k: torch.Tensor,
    entry_v: torch.Tensor,
    entry_end: torch.Tensor,
    exact_k: torch.Tensor,
    exact_v: torch.Tensor,
    exact_start: int,
    local_window: int,
    sink: torch.Tensor | None = None,
    chunk: int = 256,
) -> torch.Tensor:
    """
    q:              [B, T, H, hd]   queries at positions q_start .. q_start+T-1 (RoPE applied)
    entry_k/v:      [B, N, Hkv, hd] compressed entries, in window order
    entry_end:      [N]             position from which each entry is visible (non-decreasing)
    exact_k/v:      [B, Tk, Hkv, hd] exact keys/values at positions exact_start .. exact_start+Tk-1;
                                    must include every position q_start-L+1 .. q_start+T-1 that is >= 0
    sink:           [H] or None     per-head logit added to each softmax denominator
    returns z:      [B, T, H, hd]   per-head outputs
    """
    batch, length, heads, dim = q.shape
    kv_heads = exact_k.shape[2]
    group = heads // kv_heads
    scale = dim**-0.5
    qg = q.view(batch, length, kv_heads, group, dim).permute(0, 2, 3, 1, 4)  # [B, Hkv, G, T, hd]
    ek, ev = entry_k.permute(0, 2, 1, 3)[:, :, None], entry_v.permute(0, 2, 1, 3)[:, :, None]  # [B, Hkv, 1, N, hd]
    xk, xv = exact_k.permute(0, 2, 1, 3)[:, :, None], exact_v.permute(0, 2, 1, 3)[:, :, None]
    sink_logit = None if sink is None else sink.view(kv_heads, group, 1, 1).float()
    outputs = []
    for a in range(0, length, chunk):
        b = min(length, a + chunk)
        t = torch.arange(q_start + a, q_start + b, device=q.device)  # query positions [C]
        n_visible = int(torch.searchsorted(entry_end, t[-1], right=True))
        lo = max(exact_start, int(t[0]) - local_window + 1)
        key_pos = torch.arange(lo, int(t[-1]) + 1, device=q.device)
        rows = slice(lo - exact_start, int(t[-1]) + 1 - exact_start)
        qc = qg[:, :, :, a:b] * scale  # [B, Hkv, G, C, hd]
        s_entry = (qc @ ek[:, :, :, :n_visible].transpose(-1, -2)).float()  # [B, Hkv, G, C, n_vis]
        s_entry = s_entry.masked_fill(entry_end[None, :n_visible] > t[:, None], NEG_INF)
        s_local = (qc @ xk[:, :, :, rows].transpose(-1, -2)).float()  # [B, Hkv, G, C, C+L-1]
        in_band = (key_pos[None, :] <= t[:, None]) & (key_pos[None, :] > t[:, None] - local_window)
        s_local = s_local.masked_fill(~in_band, NEG_INF)
        parts = [s_entry, s_local]
        if sink_logit is not None:
            parts.append(sink_logit.expand(batch, kv_heads, group, b - a, 1))
        probs = torch.softmax(torch.cat(parts, dim=-1), dim=-1).to(q.dtype)
        p_entry, p_local = probs[..., :n_visible], probs[..., n_visible : n_visible + key_pos.numel()]
        outputs.append(p_entry @ ev[:, :, :, :n_visible] + p_local @ xv[:, :, :, rows])
    z = torch.cat(outputs, dim=3) if outputs else qg.new_zeros(batch, kv_heads, group, 0, dim)
    return z.permute(0, 3, 1, 2, 4).reshape(batch, length, heads, dim)
