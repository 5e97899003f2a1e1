import pytest
import torch

from phasekv.attention import (
    compressed_attention,
    full_attention,
    reference_compressed_attention,
    reference_full_attention,
)
from phasekv.compress import WindowGeometry


def _inputs(length, q_start, exact_start, window, stride, heads, kv_heads, pad_first=False, seed=0):
    gen = torch.Generator().manual_seed(seed)
    dim = 8
    geometry = WindowGeometry(window, stride, pad_first)
    n = geometry.num_complete(q_start + length)
    index = torch.arange(geometry.first_index, geometry.first_index + n)
    q = torch.randn(2, length, heads, dim, generator=gen)
    ek, ev = torch.randn(2, n, kv_heads, dim, generator=gen), torch.randn(2, n, kv_heads, dim, generator=gen)
    tk = q_start + length - exact_start
    xk, xv = torch.randn(2, tk, kv_heads, dim, generator=gen), torch.randn(2, tk, kv_heads, dim, generator=gen)
    return q, ek, ev, geometry.window_end(index), xk, xv


@pytest.mark.parametrize(
    "length, q_start, exact_start, window, stride, local, heads, kv_heads, sink, chunk",
    [
        (40, 0, 0, 8, 8, 16, 4, 1, False, 256),
        (40, 0, 0, 8, 4, 5, 4, 2, True, 7),
        (33, 0, 0, 12, 12, 1, 2, 2, False, 4),
        (1, 57, 42, 8, 8, 16, 4, 1, False, 256),  # one decoding step: exact keys are only the last L
        (9, 50, 41, 8, 4, 10, 4, 4, True, 4),  # a chunk of a chunked prefill
        (25, 0, 0, 8, 4, 3, 2, 1, True, 6),
    ],
)
def test_chunked_compressed_attention_matches_reference(
    length, q_start, exact_start, window, stride, local, heads, kv_heads, sink, chunk
):
    q, ek, ev, end, xk, xv = _inputs(length, q_start, exact_start, window, stride, heads, kv_heads)
    sink_logits = torch.randn(heads) if sink else None
    fast = compressed_attention(q, q_start, ek, ev, end, xk, xv, exact_start, local, sink_logits, chunk=chunk)
    ref = reference_compressed_attention(q, q_start, ek, ev, end, xk, xv, exact_start, local, sink_logits)
    torch.testing.assert_close(fast, ref, rtol=1e-5, atol=1e-5)


def test_entry_is_invisible_until_its_window_completes():
    """Changing entry j changes no output before position j*S+W-1, and does change that position."""
    q, ek, ev, end, xk, xv = _inputs(48, 0, 0, 8, 4, 4, 1, pad_first=False)
    base = compressed_attention(q, 0, ek, ev, end, xk, xv, 0, 16)
    for j in range(ek.shape[1]):
        ev2 = ev.clone()
        ev2[:, j] += 100.0
        out = compressed_attention(q, 0, ek, ev2, end, xk, xv, 0, 16)
        changed = (out - base).abs().amax(dim=(0, 2, 3)) > 1e-6
        first = int(changed.nonzero()[0])
        assert first == int(end[j]) == j * 4 + 7


def test_full_attention_matches_reference_with_and_without_offset():
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 10, 4, 8, generator=gen)
    k, v = torch.randn(2, 10, 2, 8, generator=gen), torch.randn(2, 10, 2, 8, generator=gen)
    torch.testing.assert_close(full_attention(q, k, v, 0, 0), reference_full_attention(q, k, v, 0, 0))
    torch.testing.assert_close(full_attention(q[:, 6:], k, v, 6, 0), reference_full_attention(q[:, 6:], k, v, 6, 0))


def test_long_sequence_never_builds_a_square_score_tensor():
    """With chunk C, the largest score block is C x (entries + C + L), far below T x T."""
    length, chunk = 4096, 128
    q, ek, ev, end, xk, xv = _inputs(length, 0, 0, 8, 8, 16, 2, 1)
    largest = []
    original = torch.Tensor.masked_fill

    def spy(self, mask, value):
        largest.append(self.shape[-2] * self.shape[-1])
        return original(self, mask, value)

    torch.Tensor.masked_fill = spy
    try:
        compressed_attention(q, 0, ek, ev, end, xk, xv, 0, 16, chunk=chunk)
    finally:
        torch.Tensor.masked_fill = original
    assert max(largest) <= chunk * (length // 8 + chunk + 16)
    assert max(largest) < length * length / 20


def test_gradients_of_chunked_attention_match_the_reference():
    """Training backpropagates through the fast path: its gradients must equal the reference's."""
    q, ek, ev, end, xk, xv = _inputs(21, 0, 0, 8, 4, 4, 2)
    sink = torch.randn(4)
    leaves = [t.double().requires_grad_() for t in (q, ek, ev, xk, xv, sink)]
    grads = []
    for fn, extra in ((compressed_attention, {"chunk": 6}), (reference_compressed_attention, {})):
        a, b, c, d, e, s = leaves
        out = fn(a, 0, b, c, end, d, e, 0, 5, s, **extra)
        weights = torch.linspace(-1, 1, out.numel(), dtype=torch.float64).view_as(out)
        grads.append(torch.autograd.grad((out * weights).sum(), leaves))
    for fast, ref in zip(*grads, strict=True):
        torch.testing.assert_close(fast, ref)
