"""Which compressed-attention kernel serves a call (`compressed_attention`, what the layers call).

- flex (`flex.py`): CUDA tensors and calls of at least FLEX_MIN_QUERIES queries (training, prefill), only
  where it is switched on (`PHASEKV_FLEX=1` in the environment, or `dispatch.USE_ON_CUDA = True`). It
  stays opt-in until the CUDA tests (tests/core/test_cuda.py, run by benchmarks/gpu_check.sh) have passed on a
  GPU; shorter calls (decoding steps, small cached chunks) keep the PyTorch paths, since flex would
  compile a kernel for every new shape.
- decode (`decode.py`): one query without gradients (a decoding step), no masks at all.
- flash (`autograd.py`): everything else; one autograd function that keeps O(T) memory for backward.
Each agrees with the plain per-query `reference.reference_compressed_attention` (tests).
"""

from __future__ import annotations

import os

import torch

from .autograd import CHUNK, flash_compressed_attention
from .decode import decode_attention
from .flex import flex_compressed_attention
from .state import KVView

USE_ON_CUDA = os.environ.get("PHASEKV_FLEX", "0") == "1"
FLEX_MIN_QUERIES = 128


def compressed_attention(q: torch.Tensor, q_start: int, kv: KVView, chunk: int = CHUNK) -> torch.Tensor:
    """q: [B, T, H, hd] (RoPE applied) at positions q_start .. q_start+T-1 -> per-head outputs z [B, T, H, hd]
    over `kv`. `chunk`: at most this many queries are scored at a time (the flash path)."""
    if USE_ON_CUDA and q.is_cuda and q.shape[1] >= FLEX_MIN_QUERIES:
        return flex_compressed_attention(q, q_start, kv)
    if q.shape[1] == 1 and not (torch.is_grad_enabled() and (q.requires_grad or kv.requires_grad())):
        return decode_attention(q, q_start, kv)
    return flash_compressed_attention(q, q_start, kv, chunk=chunk)
