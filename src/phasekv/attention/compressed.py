"""Joint attention over visible compressed entries and a local window of exact tokens.

One softmax per query over [entries j with j*S+W-1 <= t  ||  exact tokens t-L+1 .. t]
(plus an optional per-head sink logit that only adds to the denominator).

Work is proportional to what is visible, and no T x T tensor is ever built:
- the local band is gathered as exactly L keys per query (a strided view, [T, L]);
- entry scores are computed over query chunks, each against the entries visible to its last query,
  so the masked waste per row is at most chunk/S entries.
`reference.py` holds the plain per-query version this must agree with.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

NEG_INF = float("-inf")


def _band(x: torch.Tensor, first_row: int, length: int, local_window: int) -> torch.Tensor:
    """Rows first_row-L+1 .. first_row+length-1 of x [B, Tk, Hkv, hd] as windows [B, Hkv, T, L, hd]
    (window t holds rows t-L+1 .. t; rows before 0 are zero and masked by the caller)."""
    lo = first_row - local_window + 1
    pad = max(0, -lo)
    x = x[:, max(0, lo) : first_row + length]
    if pad:
        x = F.pad(x, (0, 0, 0, 0, pad, 0))
    return x.unfold(1, local_window, 1).permute(0, 2, 1, 4, 3)  # [B, Hkv, T, L, hd]


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
    chunk: int = 512,
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
    qg = q.view(batch, length, kv_heads, group, dim).transpose(1, 2) * dim**-0.5  # [B, Hkv, T, G, hd]
    acc = torch.promote_types(q.dtype, torch.float32)  # softmax precision: at least float32

    # Local band: exactly L keys per query.
    first_row = q_start - exact_start
    band_k = _band(exact_k, first_row, length, local_window)  # [B, Hkv, T, L, hd]
    band_v = _band(exact_v, first_row, length, local_window)
    s_band = (qg @ band_k.transpose(-1, -2)).to(acc)  # [B, Hkv, T, G, L]
    key_pos = torch.arange(q_start, q_start + length, device=q.device)[:, None] + torch.arange(
        1 - local_window, 1, device=q.device
    )  # [T, L]
    s_band = s_band.masked_fill((key_pos < max(0, exact_start))[:, None, :], NEG_INF)

    ek, ev = entry_k.transpose(1, 2), entry_v.transpose(1, 2)  # [B, Hkv, N, hd]
    sink_logit = None if sink is None else sink.view(kv_heads, 1, group, 1).to(acc)
    outputs = []
    for a in range(0, length, chunk):
        b = min(length, a + chunk)
        t = torch.arange(q_start + a, q_start + b, device=q.device)  # [C]
        n_vis = int(torch.searchsorted(entry_end, t[-1], right=True))
        qc = qg[:, :, a:b]  # [B, Hkv, C, G, hd]
        rows = qc.reshape(batch, kv_heads, (b - a) * group, dim)
        s_entry = (rows @ ek[:, :, :n_vis].transpose(-1, -2)).to(acc).view(batch, kv_heads, b - a, group, n_vis)
        s_entry = s_entry.masked_fill((entry_end[:n_vis][None, :] > t[:, None])[:, None, :], NEG_INF)
        parts = [s_entry, s_band[:, :, a:b]]
        if sink_logit is not None:
            parts.append(sink_logit.expand(batch, kv_heads, b - a, group, 1))
        probs = torch.softmax(torch.cat(parts, dim=-1), dim=-1).to(q.dtype)
        p_entry = probs[..., :n_vis].reshape(batch, kv_heads, (b - a) * group, n_vis)
        p_band = probs[..., n_vis : n_vis + local_window]  # [B, Hkv, C, G, L]
        out = (p_entry @ ev[:, :, :n_vis]).view(batch, kv_heads, b - a, group, dim)
        outputs.append(out + p_band @ band_v[:, :, a:b])
    z = torch.cat(outputs, dim=2)  # [B, Hkv, T, G, hd]
    return z.transpose(1, 2).reshape(batch, length, heads, dim)
