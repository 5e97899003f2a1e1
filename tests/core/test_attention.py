import pytest
import torch

from phasekv.attention import (
    KVView,
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
    kv = KVView(ek, ev, end, xk, xv, exact_start, local, torch.randn(heads) if sink else None)
    fast = compressed_attention(q, q_start, kv, chunk=chunk)
    torch.testing.assert_close(fast, reference_compressed_attention(q, q_start, kv), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("q_start", "exact_start", "kv_heads", "sink"), [(70, 61, 1, True), (30, 21, 4, False), (3, 0, 2, True)]
)
def test_decode_attention_matches_the_reference_and_the_flash_path(q_start, exact_start, kv_heads, sink):
    """A decoding step's kernel (one query, no gradients; what `compressed_attention` picks for it)."""
    from phasekv.attention.autograd import flash_compressed_attention
    from phasekv.attention.decode import decode_attention

    q, ek, ev, end, xk, xv = _inputs(1, q_start, exact_start, 8, 4, heads=4, kv_heads=kv_heads, seed=q_start)
    kv = KVView(ek, ev, end, xk, xv, exact_start, 10, torch.randn(4) if sink else None)
    got = decode_attention(q, q_start, kv)
    torch.testing.assert_close(got, reference_compressed_attention(q, q_start, kv))
    torch.testing.assert_close(got, flash_compressed_attention(q, q_start, kv))


def test_a_view_whose_keys_and_values_disagree_is_rejected():
    q, ek, ev, end, xk, xv = _inputs(12, 0, 0, 8, 4, heads=4, kv_heads=2)
    with pytest.raises(ValueError, match="keys and values differ"):
        KVView(ek, ev[:, 1:], end, xk, xv, 0, 4)
    with pytest.raises(ValueError, match="one position per entry"):
        KVView(ek, ev, end[1:], xk, xv, 0, 4)


def test_entry_is_invisible_until_its_window_completes():
    """Changing entry j changes no output before position j*S+W-1, and does change that position."""
    q, ek, ev, end, xk, xv = _inputs(48, 0, 0, 8, 4, 4, 1, pad_first=False)
    base = compressed_attention(q, 0, KVView(ek, ev, end, xk, xv, 0, 16))
    for j in range(ek.shape[1]):
        ev2 = ev.clone()
        ev2[:, j] += 100.0
        out = compressed_attention(q, 0, KVView(ek, ev2, end, xk, xv, 0, 16))
        changed = (out - base).abs().amax(dim=(0, 2, 3)) > 1e-6
        first = int(changed.nonzero()[0])
        assert first == int(end[j]) == j * 4 + 7


def test_full_attention_matches_reference_with_and_without_offset():
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(2, 10, 4, 8, generator=gen)
    k, v = torch.randn(2, 10, 2, 8, generator=gen), torch.randn(2, 10, 2, 8, generator=gen)
    torch.testing.assert_close(full_attention(q, k, v, 0, 0), reference_full_attention(q, k, v, 0, 0))
    torch.testing.assert_close(full_attention(q[:, 6:], k, v, 6, 0), reference_full_attention(q[:, 6:], k, v, 6, 0))


def _expanded_heads_attention(q, k, v, q_start, k_start):
    """The previous full_attention: each KV head copied for its query heads, an explicit causal mask."""
    group = q.shape[2] // k.shape[2]
    kt, vt = (x.transpose(1, 2).repeat_interleave(group, dim=1) for x in (k, v))
    q_pos = torch.arange(q_start, q_start + q.shape[1])
    k_pos = torch.arange(k_start, k_start + k.shape[1])
    mask = k_pos[None, :] <= q_pos[:, None]
    return torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), kt, vt, attn_mask=mask).transpose(1, 2)


@pytest.mark.parametrize("k_start", [0, 3])
@pytest.mark.parametrize("first, length", [(0, 10), (6, 4), (9, 1)])  # prefill, a cached chunk, a decoding step
def test_grouped_query_full_attention_equals_the_expanded_heads_path(k_start, first, length):
    gen = torch.Generator().manual_seed(4)
    q = torch.randn(2, length, 6, 8, generator=gen)
    k, v = torch.randn(2, 10, 2, 8, generator=gen), torch.randn(2, 10, 2, 8, generator=gen)
    q_start = k_start + first
    got = full_attention(q, k, v, q_start, k_start)
    torch.testing.assert_close(got, _expanded_heads_attention(q, k, v, q_start, k_start))
    torch.testing.assert_close(got, reference_full_attention(q, k, v, q_start, k_start))


def test_long_sequence_never_builds_a_square_score_tensor(monkeypatch):
    """With chunk C, the largest score block is C x G x (entries + C + L), far below T x T (forward and
    backward)."""
    length, chunk = 4096, 128
    q, ek, ev, end, xk, xv = _inputs(length, 0, 0, 8, 8, heads=16, kv_heads=2)
    q.requires_grad_(True)
    largest = []
    original = torch.Tensor.__matmul__

    def spy(self, other):
        out = original(self, other)
        largest.append(out.shape[-2] * out.shape[-1])
        return out

    monkeypatch.setattr(torch.Tensor, "__matmul__", spy)
    compressed_attention(q, 0, KVView(ek, ev, end, xk, xv, 0, 16), chunk=chunk).sum().backward()
    monkeypatch.undo()
    group = 16 // 2
    assert max(largest) <= chunk * group * (length // 8 + chunk + 16)
    assert max(largest) < length * length / 20


def test_gradients_of_chunked_attention_match_the_reference():
    """Training backpropagates through the fast path: its gradients must equal the reference's."""
    q, ek, ev, end, xk, xv = _inputs(21, 0, 0, 8, 4, 4, 2)
    sink = torch.randn(4)
    leaves = [t.double().requires_grad_() for t in (q, ek, ev, xk, xv, sink)]
    grads = []
    for fn, extra in ((compressed_attention, {"chunk": 6}), (reference_compressed_attention, {})):
        a, b, c, d, e, s = leaves
        out = fn(a, 0, KVView(b, c, end, d, e, 0, 5, s), **extra)
        weights = torch.linspace(-1, 1, out.numel(), dtype=torch.float64).view_as(out)
        grads.append(torch.autograd.grad((out * weights).sum(), leaves))
    for fast, ref in zip(*grads, strict=True):
        torch.testing.assert_close(fast, ref)


# The flash-style autograd function (attention/autograd.py): outputs and gradients in float64 equal the
# plain reference (differentiated by autograd) to ~1e-10.
FLASH_CASES = [
    # length, q_start, exact_start, window, stride, local, heads, kv_heads, sink, chunk
    (40, 0, 0, 8, 8, 16, 4, 1, False, 128),
    (41, 0, 0, 9, 8, 16, 4, 1, False, 128),  # W = S + 1
    (40, 0, 0, 8, 4, 5, 4, 2, True, 7),
    (33, 0, 0, 12, 12, 1, 2, 2, False, 4),
    (1, 57, 42, 8, 8, 16, 4, 1, True, 128),  # one decoding step
    (9, 50, 41, 8, 4, 10, 4, 4, True, 4),  # a chunk of a chunked prefill
    (25, 0, 0, 8, 4, 3, 8, 1, True, 6),
    (37, 0, 0, 2, 2, 4, 8, 2, False, 16),  # S = W = 2, chunk a multiple of L
    (50, 3, 0, 8, 8, 16, 6, 3, True, 20),  # queries after a prefix, chunk not a multiple of L
]


def _leaves(case, seed=0):
    length, q_start, exact_start, window, stride, local, heads, kv_heads, sink, chunk = case
    q, ek, ev, end, xk, xv = _inputs(length, q_start, exact_start, window, stride, heads, kv_heads, seed=seed)
    sink_logits = [torch.randn(heads, generator=torch.Generator().manual_seed(seed + 1))] if sink else []
    return end, [t.double().requires_grad_() for t in [q, ek, ev, xk, xv, *sink_logits]]


def _output_and_grads(fn, case, end, leaves, **extra):
    length, q_start, exact_start, window, stride, local, heads, kv_heads, sink, chunk = case
    q, ek, ev, xk, xv = leaves[:5]
    out = fn(q, q_start, KVView(ek, ev, end, xk, xv, exact_start, local, leaves[5] if sink else None), **extra)
    weights = torch.linspace(-1, 1, out.numel(), dtype=torch.float64).view_as(out)
    return out, torch.autograd.grad((out * weights).sum(), leaves)


@pytest.mark.parametrize("case", FLASH_CASES)
def test_flash_attention_outputs_and_gradients_match_the_reference(case):
    from phasekv.attention.autograd import flash_compressed_attention

    end, leaves = _leaves(case)
    flash = _output_and_grads(flash_compressed_attention, case, end, leaves, chunk=case[-1])
    want = _output_and_grads(reference_compressed_attention, case, end, leaves)
    torch.testing.assert_close(flash[0], want[0], rtol=1e-10, atol=1e-10)
    for got, expected in zip(flash[1], want[1], strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("case", [FLASH_CASES[1], FLASH_CASES[4]])
def test_flash_attention_passes_gradcheck(case):
    from phasekv.attention.autograd import flash_compressed_attention

    length, q_start, exact_start, window, stride, local, heads, kv_heads, sink, chunk = case
    end, leaves = _leaves(case, seed=5)

    def fn(*xs):
        q, ek, ev, xk, xv = xs[:5]
        s = xs[5] if sink else None
        return flash_compressed_attention(q, q_start, KVView(ek, ev, end, xk, xv, exact_start, local, s), chunk=chunk)

    # fast mode checks random projections of the Jacobian (the full gradients are compared with autograd's above)
    assert torch.autograd.gradcheck(fn, tuple(leaves), eps=1e-6, atol=1e-7, fast_mode=True)


def test_flash_attention_saves_only_linear_memory():
    """Backward keeps the inputs, the output and two floats per (query, head), not the probabilities."""
    length, heads, kv_heads = 2048, 16, 2
    q, ek, ev, end, xk, xv = _inputs(length, 0, 0, 8, 4, heads, kv_heads)
    leaves = [t.requires_grad_() for t in (q, ek, ev, xk, xv)]
    saved = []

    def pack(t):
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = compressed_attention(q, 0, KVView(*leaves[1:3], end, *leaves[3:], 0, 16, torch.zeros(heads)))
    inputs = sum(t.numel() for t in leaves) + end.numel() + heads
    assert sum(saved) <= inputs + out.numel() + 2 * out.shape[0] * length * heads  # + lse, lse_e
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in leaves)


def test_flash_attention_large_logits_and_low_precision():
    """Scores far above the local band's (a stress for the log-sum-exp bookkeeping) stay finite and exact;
    bfloat16 inputs are computed in float32 and return bfloat16 gradients."""
    from phasekv.attention.autograd import flash_compressed_attention

    q, ek, ev, end, xk, xv = _inputs(70, 0, 0, 8, 4, 4, 2)
    ek = ek * 40.0
    q = q * 20.0
    wide = KVView(ek.double(), ev.double(), end, xk.double(), xv.double(), 0, 8)
    want = reference_compressed_attention(q.double(), 0, wide)
    got = flash_compressed_attention(q, 0, KVView(ek, ev, end, xk, xv, 0, 8), chunk=16)
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-4)
    leaves = [t.bfloat16().requires_grad_() for t in (q / 20, ek / 40, ev, xk, xv)]
    out = flash_compressed_attention(leaves[0], 0, KVView(*leaves[1:3], end, *leaves[3:], 0, 8, torch.zeros(4)))
    assert out.dtype == torch.bfloat16
    out.float().sum().backward()
    assert all(t.grad.dtype == torch.bfloat16 and torch.isfinite(t.grad.float()).all() for t in leaves)


# Row buffers for decoding (state.append_rows / keep_last).


def test_append_rows_equals_cat_and_appends_in_place_without_grad():
    from phasekv.attention.state import append_rows, keep_last

    gen = torch.Generator().manual_seed(0)
    rows = [torch.randn(2, n, 3, 4, generator=gen) for n in (5, 1, 1, 7, 1, 30, 1)]
    for mode in (torch.no_grad, torch.inference_mode):
        with mode():
            held, pointers = None, set()
            for i, new in enumerate(rows):
                held = append_rows(held, new)
                torch.testing.assert_close(held, torch.cat(rows[: i + 1], dim=1), rtol=0, atol=0)
                pointers.add(held.untyped_storage().data_ptr())
            assert len(pointers) < len(rows) - 2  # most appends went into spare capacity
            kept, dropped = keep_last(held, 4)
            assert dropped == held.shape[1] - 4 and torch.equal(kept, held[:, -4:])
            assert kept.untyped_storage().nbytes() < held.untyped_storage().nbytes() / 4  # compacted
            ends = append_rows(append_rows(torch.arange(3), torch.arange(3, 5), dim=0), torch.arange(5, 6), dim=0)
            assert ends.tolist() == list(range(6))


def test_append_rows_forks_never_see_each_others_rows():
    """Two continuations of one view (KVCache.fork) each get their own rows; earlier views never change."""
    from phasekv.attention.state import append_rows

    with torch.no_grad():
        base = append_rows(torch.zeros(1, 3, 2), torch.ones(1, 1, 2))  # a buffer with spare rows
        snapshot = base.clone()
        left = append_rows(base, torch.full((1, 2, 2), 2.0))
        right = append_rows(base, torch.full((1, 1, 2), 3.0))
        left2 = append_rows(left, torch.full((1, 1, 2), 4.0))
    assert torch.equal(base, snapshot)
    assert left[0, :, 0].tolist() == [0, 0, 0, 1, 2, 2]
    assert right[0, :, 0].tolist() == [0, 0, 0, 1, 3]
    assert left2[0, :, 0].tolist() == [0, 0, 0, 1, 2, 2, 4]


def test_append_rows_with_gradients_is_cat():
    from phasekv.attention.state import append_rows

    with torch.no_grad():
        held = append_rows(torch.zeros(1, 2, 2), torch.zeros(1, 1, 2))
    new = torch.ones(1, 1, 2, requires_grad=True)
    out = append_rows(held, new)
    assert out.grad_fn is not None and out.untyped_storage().data_ptr() != held.untyped_storage().data_ptr()
    out.sum().backward()
    assert torch.equal(new.grad, torch.ones(1, 1, 2))
    with torch.inference_mode():  # an inference buffer used outside inference mode is copied, not written
        inf = append_rows(torch.zeros(1, 2, 2), torch.zeros(1, 1, 2))
    with torch.no_grad():
        assert torch.equal(append_rows(inf, torch.ones(1, 1, 2))[0, :, 0], torch.tensor([0.0, 0, 0, 1]))
