"""Compressed attention with torch's flex_attention: the CUDA kernel (`dispatch.py` says when it runs).

Keys and values are [compressed entries || exact tokens] (one tensor each), and a block mask says
what each query sees: entry j iff entry_end[j] <= t, exact token p iff t-L+1 <= p <= t. flex_attention
skips the blocks the mask empties (most of the entry staircase and everything outside the local band),
so the work is proportional to what is visible, forward and backward, in one fused kernel on CUDA.
The sink (a per-head logit added to the softmax denominator) scales the output by
sigmoid(logsumexp - sink), as in `autograd.py`. Off CUDA flex_attention runs unfused in eager mode
(correct, slow): tests use it to check the mask on any machine.
"""

from __future__ import annotations

import torch

from .state import KVView


def flex_compressed_attention(q: torch.Tensor, q_start: int, kv: KVView, block_size: int = 128) -> torch.Tensor:
    """q: [B, T, H, hd] at positions q_start.. -> z [B, T, H, hd] over `kv`."""
    from torch.nn.attention.flex_attention import AuxRequest, create_block_mask

    length, n_entries, n_exact = q.shape[1], kv.entry_k.shape[1], kv.exact_k.shape[1]
    exact_start, local_window = kv.exact_start, kv.local_window
    keys = torch.cat([kv.entry_k, kv.exact_k], dim=1).transpose(1, 2)  # [B, Hkv, N + Tk, hd]
    values = torch.cat([kv.entry_v, kv.exact_v], dim=1).transpose(1, 2)
    ends = kv.entry_end.to(device=q.device, dtype=torch.long)
    # pad so the mask can index ends[kv] for every kv (exact columns read a clamped, unused value)
    ends = torch.cat([ends, ends.new_zeros(1)])

    def mask_mod(b, h, q_idx, kv_idx):
        t = q_start + q_idx
        is_entry = kv_idx < n_entries
        entry_ok = ends[torch.clamp(kv_idx, max=n_entries)] <= t
        p = exact_start + kv_idx - n_entries
        exact_ok = (p <= t) & (p > t - local_window) & (p >= 0)
        return torch.where(is_entry, entry_ok, exact_ok)

    cuda = q.is_cuda
    mask = create_block_mask(
        mask_mod, None, None, length, n_entries + n_exact, device=q.device, BLOCK_SIZE=block_size, _compile=cuda
    )  # compiled on CUDA: never materialises the T x (N + Tk) mask
    query = q.transpose(1, 2)  # [B, H, T, hd]
    enable_gqa = query.shape[1] != keys.shape[1]
    out, aux = _flex(cuda)(query, keys, values, block_mask=mask, enable_gqa=enable_gqa, return_aux=AuxRequest(lse=True))
    lse = aux.lse
    if kv.sink is not None:
        # lse is the natural log-sum-exp of the scaled scores: adding exp(sink) to the denominator
        # multiplies the output by S / (S + e^sink) = sigmoid(lse - sink)
        out = out * torch.sigmoid(lse.float() - kv.sink.float().view(1, -1, 1)).to(out.dtype)[..., None]
    return out.transpose(1, 2)


_COMPILED = {}


def _flex(cuda: bool):
    """flex_attention, compiled into a fused kernel on CUDA (eager and unfused elsewhere)."""
    from torch.nn.attention.flex_attention import flex_attention

    if not cuda:
        return flex_attention
    if "flex" not in _COMPILED:
        _COMPILED["flex"] = torch.compile(flex_attention, dynamic=False)
    return _COMPILED["flex"]
