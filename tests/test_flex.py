"""The flex_attention path of compressed attention against the plain reference."""

from __future__ import annotations

import pytest
import torch

from phasekv.attention import reference_compressed_attention
from phasekv.attention.flex import compressed_attention_auto, flex_compressed_attention


def _inputs(device, length=40, window=8, stride=4, local=8, q_start=0, heads=4, kv_heads=2, dim=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    exact_start = max(0, q_start - local + 1)
    n_exact = q_start + length - exact_start
    n_entries = max(0, (q_start + length - window) // stride + 1)
    entry_end = torch.arange(n_entries) * stride + window - 1

    def rnd(*shape):
        return torch.randn(*shape, generator=gen).to(device)

    return dict(
        q=rnd(1, length, heads, dim), q_start=q_start,
        entry_k=rnd(1, n_entries, kv_heads, dim), entry_v=rnd(1, n_entries, kv_heads, dim),
        entry_end=entry_end.to(device),
        exact_k=rnd(1, n_exact, kv_heads, dim), exact_v=rnd(1, n_exact, kv_heads, dim),
        exact_start=exact_start, local_window=local,
    )  # fmt: skip


def _check(device, sink: bool, **kw):
    args = _inputs(device, **kw)
    if sink:
        args["sink"] = torch.linspace(-1, 1, args["q"].shape[2]).to(device)
    got = flex_compressed_attention(**args, block_size=16)
    want = reference_compressed_attention(**{k: v.cpu() if torch.is_tensor(v) else v for k, v in args.items()})
    torch.testing.assert_close(got.cpu(), want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("sink", [False, True])
@pytest.mark.parametrize("q_start", [0, 13])
def test_flex_mask_matches_reference_on_cpu(sink, q_start):
    """flex_attention runs unfused in eager mode off CUDA: checks the block mask and the sink anywhere."""
    _check("cpu", sink, q_start=q_start)


def test_auto_uses_blocked_path_off_cuda():
    args = _inputs("cpu", length=24)
    want = reference_compressed_attention(**args)
    torch.testing.assert_close(compressed_attention_auto(**args), want, atol=1e-4, rtol=1e-4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("sink", [False, True])
def test_flex_matches_reference_on_cuda(sink):
    _check("cuda", sink, length=300, q_start=5)
    args = _inputs("cuda", length=300)
    args["q"].requires_grad_(True)
    flex_compressed_attention(**args).sum().backward()  # the backward runs
    assert torch.isfinite(args["q"].grad).all()
