import pytest
import torch

from conftest import needs_dsv4, randomize, tiny_dsv4_config
from phasekv.compress import (
    DSV4Compression,
    DSV4Compressor,
    PaperCompression,
    PaperCompressor,
    WindowGeometry,
    build_compressor,
    paper,
)
from phasekv.compress.pooling import SlotLayout, gated_pooling
from phasekv.compress.reference import reference_entries
from phasekv.hooks import capture, hooks

PAPER_CASES = [
    dict(window=8, stride=8),
    dict(window=9, stride=8),  # minimal overlap at W8/S8's entry count
    dict(window=8, stride=4),
    dict(window=12, stride=12, gate="vector"),
    dict(window=8, stride=8, gate="uniform"),
    dict(window=6, stride=3, shared_kv=True),
    dict(window=8, stride=4, pad_first_window=True),
    dict(window=5, stride=2, gate="vector", pad_first_window=True),
    dict(window=4, stride=1, gate="uniform", pad_first_window=True),
    dict(window=8, stride=8, token_shift=True),
    dict(window=6, stride=3, gate="vector", shared_kv=True, token_shift=True, pad_first_window=True),
    dict(window=8, stride=8, offset_sharing=True),
    dict(window=9, stride=8, offset_sharing=True),
    dict(window=8, stride=4, gate="vector", offset_sharing=True, pad_first_window=True),
    dict(window=8, stride=8, gate_norm="sigmoid"),
    dict(window=5, stride=2, gate="vector", gate_norm="sigmoid", pad_first_window=True),
    dict(window=9, stride=8, tie_overlap_gate=True),
    dict(window=6, stride=2, tie_overlap_gate=True, gate_norm="sigmoid", pad_first_window=True),
]
OFFSETS = {
    "window8-stride8": 3,
    "window8-stride4-pad_first_windowTrue": 2,
    "window5-stride2-gatevector-pad_first_windowTrue": 1,
}


def test_window_geometry_follows_the_design_notes():
    g = WindowGeometry(window=8, stride=4)
    assert g.first_index == 0 and g.window_end(0) == 7 and g.window_end(2) == 15
    assert [g.num_complete(t) for t in (7, 8, 11, 12, 16)] == [0, 1, 1, 2, 3]
    padded = WindowGeometry(window=8, stride=4, pad_first=True)
    assert padded.first_index == -1 and padded.window_end(-1) == 3 and padded.num_complete(4) == 1
    assert list(g.windows_ending_in(8, 16)) == [1, 2]  # ends 11 and 15
    assert WindowGeometry(8, 4, entry_position="last_stride_start").rope_position(torch.tensor(1)) == 8


def test_window_offset_shifts_every_window_and_keeps_the_entry_count():
    g = WindowGeometry(window=8, stride=8, offset=3)
    assert (g.window_start(0), g.window_end(0), g.window_end(1)) == (3, 10, 18)
    assert [g.num_complete(t) for t in (10, 11, 18, 19)] == [0, 1, 1, 2]  # tokens 0..2 are in no window
    assert list(g.windows_ending_in(11, 27)) == [1, 2] and int(g.rope_position(torch.tensor(1))) == 11
    for t in range(200, 216):  # asymptotically T/S entries, as without an offset
        assert abs(g.num_complete(t) - WindowGeometry(8, 8).num_complete(t)) <= 1
    padded = WindowGeometry(window=8, stride=8, pad_first=True, offset=3)
    assert padded.first_index == -1 and padded.window_end(-1) == 2  # window -1 holds tokens 0..2
    assert padded.num_complete(3) == 1 and padded.num_complete(11) == 2
    last = WindowGeometry(8, 4, entry_position="last_stride_start", offset=1)
    assert int(last.rope_position(torch.tensor(1))) == 9


def _case_id(kwargs: dict) -> str:
    return "-".join(f"{a}{b}" for a, b in kwargs.items())


@pytest.mark.parametrize("kwargs", PAPER_CASES, ids=_case_id)
@pytest.mark.parametrize("kv_heads", [1, 2])
@pytest.mark.parametrize("offset", [0, 1])
def test_paper_compressor_matches_the_formulas(kwargs, kv_heads, offset):
    offset = offset * OFFSETS.get(_case_id(kwargs), 0)  # offsets 0 and, for some cases, one > 0
    comp = randomize(PaperCompressor(16, kv_heads, 8, PaperCompression(**kwargs), offset=offset), seed=kv_heads)
    h = torch.randn(2, 29, 16, generator=torch.Generator().manual_seed(0))
    entries = comp(h)
    key, value = reference_entries(comp, h)
    assert entries.key.shape == key.shape and len(entries) == comp.geometry.num_complete(29)
    torch.testing.assert_close(entries.key, key, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entries.value, value, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "pad, offset, shift, window",
    [(False, 0, False, 8), (True, 0, False, 8), (True, 3, False, 8), (False, 1, True, 8), (False, 0, False, 4)],
)
def test_dsv4_compressor_matches_the_formulas(pad, offset, shift, window):
    """CSA (W = 2S, two halves) and HCA (W = S, one half)."""
    cfg = DSV4Compression(window=window, stride=4, pad_first_window=pad, token_shift=shift)
    comp = randomize(DSV4Compressor(16, 2, 8, cfg, offset=offset), seed=3)
    h = torch.randn(1, 23, 16, generator=torch.Generator().manual_seed(1))
    key, _ = reference_entries(comp, h)
    torch.testing.assert_close(comp(h).key, key, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "cfg",
    [
        PaperCompression(8, 4),
        PaperCompression(8, 8, gate="vector"),
        DSV4Compression(8, 4, pad_first_window=True),
        PaperCompression(8, 8, token_shift=True),
        DSV4Compression(8, 4, pad_first_window=True, token_shift=True),
    ],
)
@pytest.mark.parametrize("offset", [0, 3])
def test_entries_computed_piecewise_equal_entries_computed_at_once(cfg, offset):
    """The decode cache calls the compressor on [last `context` hidden states || new tokens]."""
    comp = randomize(build_compressor(16, 1, 8, cfg, offset=offset), seed=5)
    h = torch.randn(1, 40, 16, generator=torch.Generator().manual_seed(2))
    whole = comp(h)
    keys, start = [], 0
    for stop in (3, 4, 9, 10, 27, 40):
        lo = max(0, start - comp.context)
        keys.append(comp(h[:, lo:stop], start=lo, emit_from=start).key)
        start = stop
    torch.testing.assert_close(torch.cat(keys, dim=1), whole.key)


def test_gate_scores_are_observable_and_sum_to_one():
    comp = randomize(PaperCompressor(16, 2, 8, PaperCompression(8, 8, gate="vector")), seed=7)
    with capture(comp, ["hook_gate_key", "hook_gate_value"]) as seen:
        comp(torch.randn(3, 32, 16))
    for name in ("hook_gate_key", "hook_gate_value"):
        alpha = seen[name][0]
        assert alpha.shape == (3, 4, 8, 2, 8)  # [B, windows, W, kv_heads, channels]
        torch.testing.assert_close(alpha.sum(2), torch.ones(3, 4, 2, 8))


def test_uniform_gate_weights_every_offset_equally():
    comp = PaperCompressor(16, 1, 8, PaperCompression(8, 8, gate="uniform"))
    with capture(comp, ["hook_gate_key"]) as seen:
        comp(torch.randn(1, 16, 16))
    assert torch.allclose(seen["hook_gate_key"][0], torch.full((1, 2, 8, 1, 1), 1 / 8))


@needs_dsv4
def test_dsv4_entries_equal_transformers_deepseek_v4_csa_compressor():
    """Same weights in, same entries out: transformers' DeepseekV4CSACompressor (before the indexer)."""
    from transformers.models.deepseek_v4.modeling_deepseek_v4 import DeepseekV4CSACompressor

    from phasekv.attention import Rotary

    hf_cfg = tiny_dsv4_config(64, index_topk=64, compress_rope_theta=160000.0)
    torch.manual_seed(0)
    hf = DeepseekV4CSACompressor(hf_cfg).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.normal_(0, 0.3)
    cfg = DSV4Compression(
        window=8,
        stride=4,
        pad_first_window=True,
        entry_position="last_stride_start",
    )
    ours = DSV4Compressor(64, 1, 32, cfg, eps=hf_cfg.rms_norm_eps)
    ours.load_state_dict({k: v for k, v in hf.state_dict().items() if not k.startswith(("indexer", "rotary"))})
    rotary = Rotary(16, hf_cfg.rope_parameters["compress"]["rope_theta"], "interleaved")
    worst = 0.0
    for length in (4, 7, 8, 13, 32):
        h = torch.randn(2, length, 64)
        with torch.no_grad():
            expected, _ = hf(h, torch.randn(2, length, 16), torch.arange(length)[None].expand(2, -1), None, 0)
            entries = ours(h)
            got = rotary(entries.key, ours.geometry.rope_position(entries.index))
        expected = expected[:, 0]  # [B, n, hd] (one KV head)
        assert got[:, :, 0].shape == expected.shape and expected.shape[1] == length // 4 and expected.abs().max() > 0.1
        worst = max(worst, (got[:, :, 0] - expected).abs().max().item())
    print(f"dsv4 vs transformers DeepseekV4CSACompressor: max abs diff {worst:.2e}")
    assert worst < 1e-5


def _entries_and_gradients(comp, h, start, emit_from):
    """Entries of comp(h[:, start:]) and the gradients of a random linear function of them (float64)."""
    comp.zero_grad()
    x = h[:, start:].clone().requires_grad_(True)
    entries = comp(x, start, emit_from)
    gen = torch.Generator().manual_seed(9)
    loss = (entries.key * torch.randn(entries.key.shape, generator=gen, dtype=h.dtype)).sum()
    loss = loss + (entries.value * torch.randn(entries.value.shape, generator=gen, dtype=h.dtype)).sum()
    loss.backward()
    return [entries.key, entries.value, x.grad] + [p.grad for p in comp.parameters()]


@pytest.mark.parametrize("kwargs", PAPER_CASES, ids=_case_id)
@pytest.mark.parametrize("piecewise", [False, True])
def test_fused_pooling_matches_the_plain_path_in_values_and_gradients(kwargs, piecewise, monkeypatch):
    """The fused autograd function (no window copy) against the plain autograd path, float64."""
    offset = OFFSETS.get(_case_id(kwargs), 0)
    comp = randomize(PaperCompressor(16, 2, 8, PaperCompression(**kwargs), offset=offset), seed=4).double()
    h = torch.randn(2, 37, 16, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    start = 9 if piecewise else 0  # a cached call: features from `start`, entries of windows ending after it
    emit_from = start + comp.context if piecewise else 0
    results = {}
    for pooling in ("plain", "fused"):
        monkeypatch.setattr(paper, "POOLING", pooling)
        results[pooling] = _entries_and_gradients(comp, h, start, emit_from)
    assert results["plain"][0].shape[1] > 0
    for want, got in zip(results["plain"], results["fused"], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "gate_width, gate_norm", [(0, "softmax"), (1, "softmax"), (3, "softmax"), (1, "sigmoid"), (3, "sigmoid")]
)
def test_fused_pooling_passes_gradcheck(gate_width, gate_norm):
    """Overlapping windows (W=4, S=2), two padded slots in the first window, two branches."""
    gen = torch.Generator().manual_seed(0)
    layout = SlotLayout(first_row=-2, count=6, stride=2, window=4, groups=(2, 1, 3, gate_width), gate_norm=gate_norm)
    x = torch.randn(2, 13, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(4, 5, 2 * 3 + 2 * gate_width, generator=gen, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(4, 2 * gate_width, generator=gen, dtype=torch.float64, requires_grad=True)
    inputs = (x, weight, bias if gate_width else None)
    assert torch.autograd.gradcheck(lambda *a: gated_pooling(*a, layout), inputs)


def test_gate_hooks_select_the_plain_path_so_a_replacement_takes_effect():
    comp = randomize(PaperCompressor(16, 1, 8, PaperCompression(8, 8)), seed=2)
    h = torch.randn(1, 16, 16, requires_grad=True)
    uniform = PaperCompressor(16, 1, 8, PaperCompression(8, 8, gate="uniform"))
    uniform.payload = comp.payload
    with hooks(comp, {"hook_gate_key": lambda alpha, _name: torch.full_like(alpha, 1 / 8)}):
        replaced = comp(h).key
    torch.testing.assert_close(replaced, uniform(h).key)
    assert not torch.allclose(comp(h).key, replaced)
