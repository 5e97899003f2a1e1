"""The flex_attention path of compressed attention against the plain reference."""

from __future__ import annotations

import pytest
import torch

from phasekv.attention import KVView, compressed_attention, reference_compressed_attention
from phasekv.attention.flex import flex_compressed_attention


def _inputs(device, length=40, window=8, stride=4, local=8, q_start=0, heads=4, kv_heads=2, dim=16, seed=0, sink=False):
    """(q, q_start, KVView) on `device`."""
    gen = torch.Generator().manual_seed(seed)
    exact_start = max(0, q_start - local + 1)
    n_exact = q_start + length - exact_start
    n_entries = max(0, (q_start + length - window) // stride + 1)
    entry_end = torch.arange(n_entries) * stride + window - 1

    def rnd(*shape):
        return torch.randn(*shape, generator=gen).to(device)

    q = rnd(1, length, heads, dim)
    kv = KVView(
        rnd(1, n_entries, kv_heads, dim), rnd(1, n_entries, kv_heads, dim), entry_end.to(device),
        rnd(1, n_exact, kv_heads, dim), rnd(1, n_exact, kv_heads, dim), exact_start, local,
        torch.linspace(-1, 1, heads).to(device) if sink else None,
    )  # fmt: skip
    return q, q_start, kv


def _on_cpu(kv: KVView) -> KVView:
    return KVView(*(t.cpu() if torch.is_tensor(t) else t for t in vars(kv).values()))


def _check(device, sink: bool, **kw):
    q, q_start, kv = _inputs(device, sink=sink, **kw)
    # small blocks cross many block boundaries off CUDA; the fused CUDA kernel tiles queries and keys in blocks of
    # 64 or more and refuses mask blocks its tiles do not divide (torch 2.11 on an H200), so CUDA takes the default
    block_size = 16 if device == "cpu" else 128
    got = flex_compressed_attention(q, q_start, kv, block_size=block_size)
    want = reference_compressed_attention(q.cpu(), q_start, _on_cpu(kv))
    torch.testing.assert_close(got.cpu(), want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("sink", [False, True])
@pytest.mark.parametrize("q_start", [0, 13])
def test_flex_mask_matches_reference_on_cpu(sink, q_start):
    """flex_attention runs unfused in eager mode off CUDA: checks the block mask and the sink anywhere."""
    _check("cpu", sink, q_start=q_start)


def test_dispatch_keeps_the_pytorch_path_off_cuda(monkeypatch):
    """Switched on, flex still serves CUDA calls only: CPU tensors take the PyTorch kernels."""
    from phasekv.attention import dispatch

    monkeypatch.setattr(dispatch, "USE_ON_CUDA", True)
    monkeypatch.setattr(dispatch, "flex_compressed_attention", None)  # would fail if called
    q, q_start, kv = _inputs("cpu", length=dispatch.FLEX_MIN_QUERIES)
    want = reference_compressed_attention(q, q_start, kv)
    torch.testing.assert_close(compressed_attention(q, q_start, kv), want, atol=1e-4, rtol=1e-4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("sink", [False, True])
def test_flex_matches_reference_on_cuda(sink):
    _check("cuda", sink, length=300, q_start=5)
    q, q_start, kv = _inputs("cuda", length=300)
    q.requires_grad_(True)
    flex_compressed_attention(q, q_start, kv).sum().backward()  # the backward runs
    assert torch.isfinite(q.grad).all()
