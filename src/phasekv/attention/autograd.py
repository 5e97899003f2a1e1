"""Compressed attention as one autograd function that keeps O(T) memory (FlashAttention-style).

The semantics of `KVView` (and `reference.py`): one softmax per query over [entries j with
entry_end[j] <= t  ||  exact tokens t-L+1 .. t], plus an optional per-head sink logit that only adds
exp(sink) to the denominator. What every call with more than one query, or with gradients, runs on the
CPU (`dispatch.py`).

Forward, over chunks of queries (rows are (query, group) pairs of one KV head):
- entries: one matmul of the chunk's queries with the entries visible to its last query; only the
  tail columns (entries that become visible inside the chunk, at most chunk/S + 1) are masked. The
  entry part is normalised on its own by `torch.softmax` (its vectorised exp is ~1.5x faster than
  `exp_`), and its log-sum-exp lse_e = max - log(largest probability) is read back from it (two
  cheap `amax` passes; `max` with indices costs as much as the softmax);
- local band: queries in blocks of L against the 2L exact keys ending at the block's end, masked to
  t-L+1..t (small: L + size keys per row);
- both parts are combined through their log-sum-exps (no concatenation of scores or keys).
Saved for backward: the inputs, the output O and, per row, lse (of everything, sink included) and lse_e:
O(T) floats instead of the O(T^2/S) probability tensors autograd would keep.

Backward recomputes each chunk's probabilities, P_e = softmax(s_e) * exp(lse_e - lse) and
P_b = exp(s_b - lse), and applies dS = P * (dP - rowsum(dO * O)); the sink's gradient is
-sum(p_sink * rowsum(dO * O)) with p_sink = exp(sink - lse).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .state import KVView

NEG_INF = float("-inf")
# Queries per chunk (at most). Entry work does not depend on it (only the tail is masked); long chunks
# cut the per-chunk overhead, short ones keep the [chunk x G, visible entries] temporaries in cache:
# chunks shrink (in multiples of L) to keep them within SCORE_BUDGET floats (measured best: 2^19, 2 MiB,
# at 8K-16K tokens; 1 thread).
CHUNK = 256
SCORE_BUDGET = 2**19


@dataclass
class _Chunk:
    a: int  # first query (row of q)
    b: int  # one past the last query
    size: int  # queries per band block
    n_blocks: int
    padded: int  # n_blocks * size >= b - a (rows past b - a are computed and dropped)
    n_first: int  # entries visible to the chunk's first query
    n_vis: int  # entries visible to its last query
    first_row: int  # row of exact_k of the chunk's first query
    tail_mask: torch.Tensor | None  # [padded, 1, n_vis - n_first]: entry not visible yet
    band_mask: torch.Tensor  # [n_blocks, size, 1, L + size]: exact key outside t-L+1..t


def _chunk_bounds(length, q_start, entry_end, group, band, chunk) -> list[tuple[int, int]]:
    """Query ranges [a, b): at most `chunk` queries, fewer where many entries are visible, so that a
    chunk's entry scores (B x Hkv x queries x G x visible entries; `group` here is B x Hkv x G) stay
    within SCORE_BUDGET floats; multiples of L."""
    chunk = max(1, chunk)
    if length <= chunk:  # one chunk if it fits (decoding-like calls: no pass over every entry_end)
        visible = int(torch.searchsorted(entry_end, q_start + length - 1, right=True)) if entry_end.numel() else 0
        if length <= band or length * group * visible <= SCORE_BUDGET:
            return [(0, length)]
    ends = entry_end.tolist()
    bounds, a = [], 0
    while a < length:
        visible = bisect.bisect_right(ends, q_start + a + chunk - 1)
        size = min(chunk, max(band, SCORE_BUDGET // max(1, group * visible) // band * band))
        bounds.append((a, min(length, a + size)))
        a += size
    return bounds


def _plan(length, q_start, entry_end, exact_start, band, chunk, group) -> list[_Chunk]:
    device = entry_end.device
    bounds = _chunk_bounds(length, q_start, entry_end, group, band, chunk)
    starts = [a for a, _ in bounds]
    ends = [b for _, b in bounds]
    if entry_end.numel():
        bounds = torch.tensor([q_start + a for a in starts] + [q_start + b - 1 for b in ends], device=device)
        counts = torch.searchsorted(entry_end, bounds.to(entry_end.dtype), right=True).tolist()
    else:
        counts = [0] * (2 * len(starts))
    lowest_key = max(0, exact_start)
    plan = []
    for i, (a, b) in enumerate(zip(starts, ends, strict=True)):
        size = min(band, b - a)
        n_blocks = -(-(b - a) // size)
        padded = n_blocks * size
        span = band + size
        p0 = q_start + a
        n_first, n_vis = counts[i], counts[len(starts) + i]
        tail = None
        if n_vis > n_first:
            t = torch.arange(p0, p0 + padded, device=device)
            tail = (entry_end[n_first:n_vis][None, :] > t[:, None])[:, None, :]
        r = torch.arange(size, device=device)[:, None]
        j = torch.arange(span, device=device)[None, :]
        block_start = p0 + size * torch.arange(n_blocks, device=device)[:, None, None]
        outside = (j <= r) | (j > r + band) | (block_start - band + j < lowest_key)  # [n, size, span]
        plan.append(_Chunk(a, b, size, n_blocks, padded, n_first, n_vis, p0 - exact_start, tail, outside[:, :, None]))
    return plan


def _rows(x: torch.Tensor, c: _Chunk, kv_heads: int, dtype: torch.dtype) -> torch.Tensor:
    """x[:, a:b] [B, C, H, hd] as rows [B, Hkv, padded * G, hd] (row = query * G + group), zero-padded."""
    batch, _, heads, dim = x.shape
    part = x[:, c.a : c.b]
    if c.padded > c.b - c.a:
        part = F.pad(part, (0, 0, 0, 0, 0, c.padded - (c.b - c.a)))
    part = part.view(batch, c.padded, kv_heads, heads // kv_heads, dim).transpose(1, 2)
    return part.reshape(batch, kv_heads, c.padded * (heads // kv_heads), dim).to(dtype)


def _blocks(x: torch.Tensor, c: _Chunk, band: int) -> torch.Tensor:
    """Exact rows of x [B, Hkv, Tk, hd] for the chunk's band blocks: [B, Hkv, n, L + size, hd], block i
    holding rows first_row + i*size - L .. first_row + (i+1)*size - 1 (zero outside x)."""
    lo, hi = c.first_row - band, c.first_row + c.n_blocks * c.size
    rows = x[:, :, max(0, lo) : min(x.shape[2], hi)]
    rows = F.pad(rows, (0, 0, max(0, -lo), max(0, hi - x.shape[2])))
    return rows.unfold(2, band + c.size, c.size).transpose(-1, -2)


def _fold_into(grad: torch.Tensor, blocks: torch.Tensor, c: _Chunk, band: int) -> None:
    """Add per-block gradients [B, Hkv, n, L + size, hd] into grad [B, Hkv, Tk, hd] (overlap-add)."""
    batch, kv_heads, n, span, dim = blocks.shape
    lo, hi = c.first_row - band, c.first_row + n * c.size
    if span == 2 * c.size:  # blocks overlap by exactly one half: two adds
        window = blocks.new_zeros(batch, kv_heads, hi - lo, dim)
        window[:, :, : n * c.size] += blocks[:, :, :, : c.size].reshape(batch, kv_heads, n * c.size, dim)
        window[:, :, c.size :] += blocks[:, :, :, c.size :].reshape(batch, kv_heads, n * c.size, dim)
    else:
        index = c.size * torch.arange(n, device=blocks.device)[:, None] + torch.arange(span, device=blocks.device)
        window = blocks.new_zeros(batch, kv_heads, hi - lo, dim)
        window.index_add_(2, index.reshape(-1), blocks.reshape(batch, kv_heads, n * span, dim))
    keep_lo, keep_hi = max(0, lo), min(grad.shape[2], hi)
    grad[:, :, keep_lo:keep_hi] += window[:, :, keep_lo - lo : keep_hi - lo]


def _band_scores(qc, kb, c: _Chunk, group: int) -> torch.Tensor:
    """Masked band scores [B, Hkv, n, size * G, L + size] of the chunk's scaled query rows."""
    batch, kv_heads, _, dim = qc.shape
    qb = qc.view(batch, kv_heads, c.n_blocks, c.size * group, dim)
    sb = qb @ kb.transpose(-1, -2)
    span = sb.shape[-1]
    sb.view(batch, kv_heads, c.n_blocks, c.size, group, span).masked_fill_(c.band_mask, NEG_INF)
    return sb


def _entry_scores(qc, ek, c: _Chunk, group: int) -> torch.Tensor:
    """Entry scores [B, Hkv, padded * G, n_vis]; entries not yet visible to a row get the lowest finite
    value (a row that sees none then has lse_e ~ -3e38 and weight 0, without NaNs)."""
    se = qc @ ek[:, :, : c.n_vis].transpose(-1, -2)
    if c.tail_mask is not None:
        batch, kv_heads = se.shape[:2]
        view = se.view(batch, kv_heads, c.padded, group, c.n_vis)[..., c.n_first :]
        view.masked_fill_(c.tail_mask, torch.finfo(se.dtype).min)
    return se


def _forward(q, ek, ev, xk, xv, sink_rows, plan, band, acc):
    """Returns O [B, T, H, hd] (acc dtype), lse and lse_e [B, Hkv, T * G]."""
    batch, length, heads, dim = q.shape
    kv_heads = xk.shape[1]
    group = heads // kv_heads
    scale = dim**-0.5
    out = q.new_empty(batch, length, kv_heads, group, dim, dtype=acc)
    lse_all = q.new_empty(batch, kv_heads, length * group, dtype=acc)
    lse_e_all = torch.full_like(lse_all, NEG_INF)
    for c in plan:
        rows = c.padded * group
        real = (c.b - c.a) * group
        qc = _rows(q, c, kv_heads, acc) * scale  # [B, Hkv, R, hd]
        kb, vb = _blocks(xk, c, band), _blocks(xv, c, band)
        sb = _band_scores(qc, kb, c, group)
        m = sb.amax(-1).view(batch, kv_heads, rows)
        if sink_rows is not None:
            sink_c = sink_rows[:, :rows]
            m = torch.maximum(m, sink_c)
        pb = torch.exp(sb - m.view(batch, kv_heads, c.n_blocks, c.size * group, 1))
        total = pb.sum(-1).view(batch, kv_heads, rows)
        o = (pb @ vb).view(batch, kv_heads, rows, dim)
        if sink_rows is not None:
            total = total + torch.exp(sink_c - m)
        if c.n_vis:
            se = _entry_scores(qc, ek, c, group)
            me = se.amax(-1)
            pe = torch.softmax(se, dim=-1)
            lse_e = me - torch.log(pe.amax(-1))  # the largest probability is exp(0) / sum exp(s - max)
            top = torch.maximum(m, lse_e)
            we, wb = torch.exp(lse_e - top), torch.exp(m - top)
            o = (pe @ ev[:, :, : c.n_vis]) * we[..., None] + o * wb[..., None]
            total = we + total * wb
            m = top
            lse_e_all[:, :, c.a * group : c.a * group + real] = lse_e[:, :, :real]
        o = o / total[..., None]
        lse_all[:, :, c.a * group : c.a * group + real] = (m + torch.log(total))[:, :, :real]
        out[:, c.a : c.b] = o.view(batch, kv_heads, c.padded, group, dim)[:, :, : c.b - c.a].transpose(1, 2)
    return out.view(batch, length, heads, dim), lse_all, lse_e_all


def _backward(q, ek, ev, xk, xv, sink_rows, out, lse_all, lse_e_all, d_out, plan, band, acc):
    batch, length, heads, dim = q.shape
    kv_heads = xk.shape[1]
    group = heads // kv_heads
    scale = dim**-0.5
    dq = q.new_empty(batch, length, kv_heads, group, dim, dtype=acc)
    dek, dev = torch.zeros_like(ek), torch.zeros_like(ev)
    dxk, dxv = torch.zeros_like(xk), torch.zeros_like(xv)
    dsink = None if sink_rows is None else sink_rows.new_zeros(kv_heads, group)
    for c in plan:
        rows = c.padded * group
        real = (c.b - c.a) * group
        qc = _rows(q, c, kv_heads, acc) * scale
        do = _rows(d_out, c, kv_heads, acc)
        delta = (do * _rows(out, c, kv_heads, acc)).sum(-1)  # [B, Hkv, R]; 0 on padded rows
        lse = F.pad(lse_all[:, :, c.a * group : c.a * group + real], (0, rows - real))
        # band
        kb, vb = _blocks(xk, c, band), _blocks(xv, c, band)
        block_shape = (batch, kv_heads, c.n_blocks, c.size * group, -1)
        pb = torch.exp(_band_scores(qc, kb, c, group) - lse.view(block_shape))
        dob = do.view(block_shape)
        dsb = pb * (dob @ vb.transpose(-1, -2) - delta.view(block_shape))
        _fold_into(dxv, pb.transpose(-1, -2) @ dob, c, band)
        _fold_into(dxk, dsb.transpose(-1, -2) @ qc.view(block_shape), c, band)
        dqc = (dsb @ kb).view(batch, kv_heads, rows, dim)
        # entries
        if c.n_vis:
            lse_e = F.pad(lse_e_all[:, :, c.a * group : c.a * group + real], (0, rows - real))
            pe = torch.softmax(_entry_scores(qc, ek, c, group), dim=-1)
            pe.mul_(torch.exp(lse_e - lse)[..., None])
            dse = do @ ev[:, :, : c.n_vis].transpose(-1, -2)
            dse.sub_(delta[..., None]).mul_(pe)
            dev[:, :, : c.n_vis] += pe.transpose(-1, -2) @ do
            dek[:, :, : c.n_vis] += dse.transpose(-1, -2) @ qc
            dqc += dse @ ek[:, :, : c.n_vis]
        if dsink is not None:
            p_sink = torch.exp(sink_rows[:, :rows] - lse)
            dsink -= (p_sink * delta).sum(0).view(kv_heads, c.padded, group).sum(1)
        dqc = (dqc * scale).view(batch, kv_heads, c.padded, group, dim)
        dq[:, c.a : c.b] = dqc[:, :, : c.b - c.a].transpose(1, 2)
    return dq.view(batch, length, heads, dim), dek, dev, dxk, dxv, dsink


def _prepare(q, entry_k, entry_v, exact_k, exact_v, sink):
    """Inputs in the compute layout: [B, Hkv, n, hd] contiguous in the accumulation dtype."""
    acc = torch.promote_types(q.dtype, torch.float32)
    kv_heads = exact_k.shape[2]
    group = q.shape[2] // kv_heads

    def lay(x):
        return x.transpose(1, 2).to(acc).contiguous()

    sink_rows = None
    if sink is not None:  # per row (query * G + group) of the largest chunk
        sink_rows = sink.to(acc).view(kv_heads, 1, group)
    return acc, lay(entry_k), lay(entry_v), lay(exact_k), lay(exact_v), sink_rows


def _sink_rows(sink_rows, max_padded):
    if sink_rows is None:
        return None
    kv_heads, _, group = sink_rows.shape
    return sink_rows.expand(kv_heads, max_padded, group).reshape(kv_heads, max_padded * group)


class CompressedAttentionFunction(torch.autograd.Function):
    """autograd.Function(q, entry_k, entry_v, exact_k, exact_v, sink, entry_end, q_start, exact_start,
    local_window, chunk) -> z [B, T, H, hd]; see `flash_compressed_attention`."""

    @staticmethod
    def forward(ctx, q, entry_k, entry_v, exact_k, exact_v, sink, entry_end, q_start, exact_start, band, chunk):
        plan = _plan(q.shape[1], q_start, entry_end, exact_start, band, chunk, q.shape[0] * q.shape[2])
        acc, ek, ev, xk, xv, sink_rows = _prepare(q, entry_k, entry_v, exact_k, exact_v, sink)
        sink_rows = _sink_rows(sink_rows, max(c.padded for c in plan))
        out, lse, lse_e = _forward(q, ek, ev, xk, xv, sink_rows, plan, band, acc)
        z = out.to(q.dtype)
        ctx.save_for_backward(q, entry_k, entry_v, exact_k, exact_v, sink, entry_end, out, lse, lse_e)
        ctx.args = (q_start, exact_start, band, chunk)
        return z

    @staticmethod
    def backward(ctx, d_z):
        q, entry_k, entry_v, exact_k, exact_v, sink, entry_end, out, lse, lse_e = ctx.saved_tensors
        q_start, exact_start, band, chunk = ctx.args
        plan = _plan(q.shape[1], q_start, entry_end, exact_start, band, chunk, q.shape[0] * q.shape[2])
        acc, ek, ev, xk, xv, sink_rows = _prepare(q, entry_k, entry_v, exact_k, exact_v, sink)
        sink_rows = _sink_rows(sink_rows, max(c.padded for c in plan))
        dq, dek, dev, dxk, dxv, dsink = _backward(
            q, ek, ev, xk, xv, sink_rows, out, lse, lse_e, d_z.contiguous(), plan, band, acc
        )

        def back(g, like):
            return g.transpose(1, 2).to(like.dtype)

        return (
            dq.to(q.dtype), back(dek, entry_k), back(dev, entry_v), back(dxk, exact_k), back(dxv, exact_v),
            None if sink is None else dsink.reshape(-1).to(sink.dtype), None, None, None, None, None,
        )  # fmt: skip


def flash_compressed_attention(q: torch.Tensor, q_start: int, kv: KVView, chunk: int = CHUNK) -> torch.Tensor:
    """q: [B, T, H, hd] at positions q_start.. -> z [B, T, H, hd] over `kv`; memory O(T) for backward.
    `chunk` queries are scored at a time."""
    if q.shape[1] == 0:
        return q.new_zeros(q.shape)
    entry_end = kv.entry_end.to(device=q.device, dtype=torch.long)
    return CompressedAttentionFunction.apply(
        q, kv.entry_k, kv.entry_v, kv.exact_k, kv.exact_v, kv.sink, entry_end, q_start, kv.exact_start,
        kv.local_window, chunk,
    )  # fmt: skip
