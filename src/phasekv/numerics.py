"""CPU math that gives the same answer on every call: MKL's vector math functions resolved before first use.

PyTorch's CPU kernels send contiguous float32/float64 unary math (cos, sin, exp, log, sqrt, tanh, ...) to MKL's
vector math library (VML), each intra-op thread calling it on its chunk. oneMKL 2024.2, the version in PyTorch's
wheels, picks each function's kernel on that function's first call; when the first call runs on several
threads at once, under CPU oversubscription one thread can run a low-accuracy kernel for its whole chunk
(pytorch/pytorch#188792). Measured here: the first RoPE of a process's first forward (cos and sin of a
96 x 32 table, two threads) had its main thread's half of the positions wrong by up to 6e-4, every later call
exact, so that forward's log-probs differed from every later forward's by 4e-4. Calling each function once on a
single element (one thread, nothing to race with) settles the choice before any concurrent call.
"""

from __future__ import annotations

import torch

# the unary functions ATen sends to MKL VML (aten/src/ATen/cpu/vml.h), for float32 and float64
VML_FUNCTIONS = (
    "acos", "asin", "atan", "cos", "erf", "erfc", "erfinv", "exp", "log", "log10", "log2", "sin", "sqrt", "tan",
    "tanh", "trunc",
)  # fmt: skip
VML_DTYPES = (torch.float32, torch.float64)


def settle_vml_dispatch() -> None:
    """Call every VML-backed function once on a one-element tensor of each dtype (cheap; idempotent)."""
    one = {dtype: torch.full((1,), 0.5, dtype=dtype) for dtype in VML_DTYPES}
    with torch.no_grad():
        for name in VML_FUNCTIONS:
            for x in one.values():
                getattr(torch, name)(x)


settle_vml_dispatch()
