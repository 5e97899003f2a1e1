"""Joint attention over visible compressed entries and a local window of exact tokens.

One softmax per query over [entries j with j*S+W-1 <= t  ||  exact tokens t-L+1 .. t]
(plus an optional per-head sink logit that only adds to the denominator).

Work is proportional to what is visible, and no T x T tensor is ever built:
- the local band is computed blockwise: queries are cut into blocks of L, and each block scores the
  2L exact keys from one block before it to its own end (the band t-L+1..t is then masked), so no
  per-query [L, hd] key copy is made;
- entry scores are computed over query chunks, each against the entries visible to its last query,
  so the masked waste per row is at most chunk/S entries (chunks are at most BLOCKS_PER_CHUNK
  blocks of L queries);
- each block's keys are [visible entries || its L + size exact keys], so one matmul, one mask, one fused
  softmax and one matmul with the values serve the whole block; a sink multiplies the softmax by
  sigmoid(logsumexp - sink), which is the same as adding exp(sink) to its denominator.
Short calls with many entries (decoding: one query against every entry) take the per-query path
instead (`_blocks_pay` decides), which gathers the band as exactly L keys per query.
`reference.py` holds the plain per-query version both must agree with.

`compressed_attention` runs `autograd.flash_compressed_attention` by default: the same blocked
computation as one autograd function that saves O(T) for backward and recomputes the probabilities
chunk by chunk (FlashAttention-style). `blocked_compressed_attention` is the path above, differentiated
by autograd (it keeps the O(T^2/S) probability tensors); `IMPLEMENTATION` selects the default. A single
query without gradients (a decoding step) takes `_decode_attention`, which needs no masks at all.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .autograd import CHUNK, flash_compressed_attention

NEG_INF = float("-inf")
# Query chunks hold at most this many blocks of L queries: every query of a chunk scores the entries
# visible to its last query, so shorter chunks waste fewer masked entries (8 measured best for L = 16).
BLOCKS_PER_CHUNK = 8
# "flash": the O(T)-memory autograd function (autograd.py); "blocked": this module's autograd path.
IMPLEMENTATION = "flash"


def _key_blocks(x: torch.Tensor, first_row: int, n_blocks: int, size: int, local_window: int) -> torch.Tensor:
    """Rows of x [B, Tk, Hkv, hd] for query blocks of `size` starting at row first_row, as overlapping
    blocks [B, Hkv, n_blocks, L + size, hd]: block i holds rows first_row + i*size - L .. first_row +
    (i+1)*size - 1. Rows outside x are zero (the caller masks them)."""
    lo, hi = first_row - local_window, first_row + n_blocks * size
    rows = x[:, max(0, lo) : min(x.shape[1], hi)]
    rows = F.pad(rows, (0, 0, 0, 0, max(0, -lo), max(0, hi - x.shape[1])))  # [B, L + n*size, Hkv, hd]
    blocks = rows.transpose(1, 2).unfold(2, local_window + size, size)  # [B, Hkv, n, hd, L + size]
    return blocks.transpose(-1, -2)


def _blocks_pay(
    length: int, group: int, dim: int, band: int, chunk: int, entry_end: torch.Tensor, q_start: int
) -> bool:
    """Whether the block path moves less memory than the per-query path for the largest chunk: blocks
    copy every visible entry once per block (n_blocks x n_vis x hd), the per-query path copies L exact
    keys per query and concatenates and slices the scores (C x (L x hd + G x n_vis))."""
    c = min(chunk, length)
    size = min(band, c)
    n_vis = int(torch.searchsorted(entry_end, q_start + length - 1, right=True))
    return -(-c // size) * n_vis * dim <= c * (band * dim + group * n_vis)


def _band(x: torch.Tensor, first_row: int, length: int, local_window: int) -> torch.Tensor:
    """Rows first_row-L+1 .. first_row+length-1 of x [B, Tk, Hkv, hd] as windows [B, Hkv, T, L, hd]
    (window t holds rows t-L+1 .. t; rows before 0 are zero and masked by the caller)."""
    lo = first_row - local_window + 1
    pad = max(0, -lo)
    x = x[:, max(0, lo) : first_row + length]
    if pad:
        x = F.pad(x, (0, 0, 0, 0, pad, 0))
    return x.unfold(1, local_window, 1).permute(0, 2, 1, 4, 3)  # [B, Hkv, T, L, hd]


def _per_query_attention(
    q, q_start, entry_k, entry_v, entry_end, exact_k, exact_v, exact_start, local_window, sink, chunk
):
    """The band gathered per query (exactly L keys each) and entries scored per chunk: cheaper than
    blocks when there are few queries per block and many entries (decoding, short cached calls)."""
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
    chunk:          at most this many queries are scored at a time
    returns z:      [B, T, H, hd]   per-head outputs
    """
    args = (q, q_start, entry_k, entry_v, entry_end, exact_k, exact_v, exact_start, local_window, sink)
    if q.shape[1] == 1 and not (torch.is_grad_enabled() and any(_needs_grad(x) for x in args)):
        return _decode_attention(*args)
    if IMPLEMENTATION == "flash":
        return flash_compressed_attention(*args, chunk=min(chunk, CHUNK))
    return blocked_compressed_attention(
        q, q_start, entry_k, entry_v, entry_end, exact_k, exact_v, exact_start, local_window, sink, chunk
    )


def _needs_grad(x) -> bool:
    return isinstance(x, torch.Tensor) and x.requires_grad


def _decode_attention(q, q_start, entry_k, entry_v, entry_end, exact_k, exact_v, exact_start, local_window, sink):
    """One query (a decoding step), no gradients: every entry up to the first with entry_end > t and the
    exact keys t-L+1..t are visible, so nothing is masked; scores [B, Hkv, G, n_vis + L (+ 1)], one
    softmax, two matmuls with the values. A dozen small ops: the per-step overhead is what counts here."""
    batch, _, heads, dim = q.shape
    kv_heads = exact_k.shape[2]
    group = heads // kv_heads
    acc = torch.promote_types(q.dtype, torch.float32)
    qg = q.reshape(batch, kv_heads, group, dim) * dim**-0.5  # [B, Hkv, G, hd]
    lo = max(q_start - local_window + 1, 0, exact_start) - exact_start
    hi = q_start - exact_start + 1
    band_k, band_v = exact_k[:, lo:hi].transpose(1, 2), exact_v[:, lo:hi].transpose(1, 2)  # [B, Hkv, n, hd]
    n_vis = int(torch.searchsorted(entry_end, q_start, right=True)) if entry_end.numel() else 0
    parts = [qg @ band_k.transpose(-1, -2)]
    if n_vis:
        parts.insert(0, qg @ entry_k[:, :n_vis].transpose(1, 2).transpose(-1, -2))
    if sink is not None:  # a sink logit only adds exp(sink) to the denominator
        parts.append(sink.to(parts[0].dtype).view(1, kv_heads, group, 1).expand(batch, -1, -1, -1))
    probs = torch.softmax(torch.cat(parts, dim=-1).to(acc), dim=-1).to(q.dtype)
    out = probs[..., n_vis : n_vis + hi - lo] @ band_v
    if n_vis:
        out = out + probs[..., :n_vis] @ entry_v[:, :n_vis].transpose(1, 2)
    return out.reshape(batch, 1, heads, dim)


def blocked_compressed_attention(
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
    """`compressed_attention` differentiated by autograd (blocks or per-query path, see the module
    docstring): keeps the probability tensors of every chunk for backward."""
    kv_heads = exact_k.shape[2]
    step = min(chunk, BLOCKS_PER_CHUNK * local_window)
    args = (q, q_start, entry_k, entry_v, entry_end, exact_k, exact_v, exact_start, local_window, sink, chunk)
    if _blocks_pay(q.shape[1], q.shape[2] // kv_heads, q.shape[3], local_window, step, entry_end, q_start):
        return _block_attention(*args)
    return _per_query_attention(*args)


def _block_attention(q, q_start, entry_k, entry_v, entry_end, exact_k, exact_v, exact_start, local_window, sink, chunk):
    """Queries in blocks of L against [visible entries || the block's L + size exact keys] (see the
    module docstring)."""
    batch, length, heads, dim = q.shape
    kv_heads = exact_k.shape[2]
    group = heads // kv_heads
    band = local_window
    ek, ev = entry_k.transpose(1, 2), entry_v.transpose(1, 2)  # [B, Hkv, N, hd]
    acc = torch.promote_types(q.dtype, torch.float32)  # softmax dtype: float32 for half types
    lowest_key = max(0, exact_start)
    chunk = max(1, min(chunk, BLOCKS_PER_CHUNK * band))
    outputs = []
    for a in range(0, length, chunk):
        b = min(length, a + chunk)
        size = min(band, b - a)  # queries per block (fewer than L only for short calls, e.g. decoding)
        n_blocks = -(-(b - a) // size)
        padded = n_blocks * size
        span = band + size  # exact keys per block
        p0 = q_start + a  # position of the chunk's first query
        # Queries [B, Hkv, n_blocks, size*G, hd], scaled; rows past the chunk are zero, dropped at the end.
        qc = F.pad(q[:, a:b], (0, 0, 0, 0, 0, padded - (b - a))) * dim**-0.5
        qc = qc.view(batch, n_blocks, size, kv_heads, group, dim).permute(0, 3, 1, 2, 4, 5)
        qc = qc.reshape(batch, kv_heads, n_blocks, size * group, dim)
        # Keys of block i: the entries visible to the chunk's last query, then the L + size exact keys
        # that end at the block's last position; [B, Hkv, n_blocks, n_vis + L + size, hd].
        n_vis = int(torch.searchsorted(entry_end, q_start + b - 1, right=True))
        first_row = p0 - exact_start
        keys = _key_blocks(exact_k, first_row, n_blocks, size, band)
        values = _key_blocks(exact_v, first_row, n_blocks, size, band)
        if n_vis:
            shape = (batch, kv_heads, n_blocks, n_vis, dim)
            keys = torch.cat([ek[:, :, None, :n_vis].expand(shape), keys], dim=3)
            values = torch.cat([ev[:, :, None, :n_vis].expand(shape), values], dim=3)
        scores = (qc @ keys.transpose(-1, -2)).to(acc)  # [B, Hkv, n, size*G, n_vis + span]
        scores = scores.view(batch, kv_heads, n_blocks, size, group, n_vis + span)
        # Masks [n, size, n_vis + span]: entries not yet visible; exact keys outside t-L+1..t or before
        # lowest_key.
        r = torch.arange(size, device=q.device)[:, None]  # query offset in its block
        j = torch.arange(span, device=q.device)[None, :]  # key slot: position block_start - L + j
        block_start = p0 + size * torch.arange(n_blocks, device=q.device)[:, None, None]
        outside = (j <= r) | (j > r + band) | (block_start - band + j < lowest_key)  # [n, size, span]
        if n_vis:
            t = block_start + r  # [n, size, 1] query positions
            outside = torch.cat([entry_end[:n_vis] > t, outside.expand(n_blocks, size, span)], dim=-1)
        scores = scores.masked_fill(outside[:, :, None, :], NEG_INF)
        probs = torch.softmax(scores, dim=-1)
        if sink is not None:  # a sink logit only adds exp(sink) to the denominator
            lse = torch.logsumexp(scores, dim=-1, keepdim=True)
            probs = probs * torch.sigmoid(lse - sink.view(kv_heads, 1, 1, group, 1).to(acc))
        probs = probs.to(q.dtype).view(batch, kv_heads, n_blocks, size * group, n_vis + span)
        out = (probs @ values).view(batch, kv_heads, padded, group, dim)[:, :, : b - a]
        outputs.append(out)
    z = torch.cat(outputs, dim=2) if len(outputs) > 1 else outputs[0]  # [B, Hkv, T, G, hd]
    return z.transpose(1, 2).reshape(batch, length, heads, dim)
