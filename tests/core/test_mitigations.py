"""Compressor candidates at W8/S8's cache size: staggered window offsets, W16/S8 overlap, token shift, the
runtime window offset that randomised-offset training uses, and the designs that take away what gates use to
prefer offsets (offset-shared compressors, non-competitive sigmoid gates, a tied overlap gate)."""

from __future__ import annotations

import pytest
import torch

from conftest import randomize
from phasekv.attention.reference import reference_layer
from phasekv.cache import KVCache
from phasekv.cache.generate import prefill
from phasekv.compress import DSV4Compression, PaperCompression, PaperCompressor
from phasekv.config import ConfigError, compression_from_dict
from phasekv.hooks import capture
from phasekv.model import PhaseKVModel, load_checkpoint, preset_config, save_checkpoint

OFFSET_DESIGNS = ["w8s8-1kv-offset-shared", "w9s8-1kv-offset-shared", "w8s8-1kv-sigmoid", "w9s8-1kv-tied"]
NEW_PRESETS = [
    "w8s8-1kv-stagger",
    "w16s8-1kv",
    "w8s8-1kv-shift",
    "w9s8-1kv",
    "w10s8-1kv",
    "w9s8-1kv-vector",
    *OFFSET_DESIGNS,
]


def _model(name: str = "w8s8-1kv", seed: int = 1, **overrides) -> PhaseKVModel:
    return randomize(PhaseKVModel(preset_config(name, vocab_size=50, **overrides)), seed=seed).eval()


def _offsets(model: PhaseKVModel) -> list[int]:
    return [layer.self_attn.compressor.geometry.offset for layer in model.layers]


def test_stagger_gives_each_layer_its_offset():
    assert _offsets(_model("w8s8-1kv-stagger")) == [0, 4]
    assert _offsets(_model("w8s8-1kv-stagger", num_layers=4)) == [0, 2, 4, 6]
    with torch.device("meta"):
        paper = PhaseKVModel(preset_config("w8s8-1kv-stagger", "paper"))
    assert _offsets(paper)[:5] == [0, 0, 0, 0, 1] and _offsets(paper)[-1] == 7
    explicit = _model(compression=PaperCompression(8, 8, offsets=(5, 2)))
    assert _offsets(explicit) == [5, 2]


@pytest.mark.parametrize(
    "compression",
    [
        PaperCompression(8, 8, offsets=(3, 6)),
        PaperCompression(8, 4, offsets=(1, 3), pad_first_window=True, entry_position="last_stride_start"),
        PaperCompression(8, 8, token_shift=True, stagger="layer", gate="vector"),
        DSV4Compression(8, 4, pad_first_window=True, offsets=(2, 1)),
    ],
    ids=["offsets", "padded-last-stride", "shift-stagger", "dsv4-offsets"],
)
def test_layer_matches_the_reference_built_from_the_definitions(compression):
    model = _model(compression=compression)
    x = torch.randn(2, 37, model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        for layer in model.layers:
            attn = layer.self_attn
            torch.testing.assert_close(attn(x), reference_layer(attn, x), rtol=1e-5, atol=1e-5)


def test_staggered_cache_holds_the_same_number_of_entries_per_layer_up_to_one():
    model = _model("w8s8-1kv-stagger")
    cache = KVCache.for_model(model)
    with torch.no_grad():
        prefill(model, torch.randint(0, 50, (1, 207)), cache, chunk_size=17)
    assert cache.num_entries() == [25, 25]  # offsets 0 and 4: windows end at 7, 15, .. and 11, 19, .. <= 206
    cache = KVCache.for_model(model)
    with torch.no_grad():
        prefill(model, torch.randint(0, 50, (1, 203)), cache, chunk_size=17)
    assert cache.num_entries() == [25, 24]
    assert [s.hidden.shape[1] for s in cache.layers] == [7, 7]


def test_token_shift_keeps_entry_count_and_cache_bytes_and_reads_the_previous_token():
    plain, shift = _model("w8s8-1kv"), _model("w8s8-1kv-shift")
    sizes = []
    for model in (plain, shift):
        cache = KVCache.for_model(model)
        with torch.no_grad():
            prefill(model, torch.randint(0, 50, (1, 45)), cache, chunk_size=6)
        sizes.append((cache.num_entries(), cache.nbytes()))
    assert sizes[0] == sizes[1]
    assert [s.hidden.shape[1] for s in cache.layers] == [8, 8]  # the unfinished window and the token before it
    comp = shift.layers[0].self_attn.compressor
    h = torch.randn(1, 24, comp.in_features // 2, generator=torch.Generator().manual_seed(0))
    moved = h.clone()
    moved[:, 7] += 1.0  # last slot of window 0: window 1 (8..15) reads it through h_{p-1}
    with torch.no_grad():
        before, after = comp(h).key, comp(moved).key
    # any change at all: a saturated gate can make the read tiny, but not absent
    assert not torch.equal(before[:, 1], after[:, 1]) and torch.equal(before[:, 2], after[:, 2])


def test_window_offset_overrides_every_layer_for_the_block_only():
    model = _model("w8s8-1kv-stagger")
    fixed = _model(compression=PaperCompression(8, 8, offsets=(5, 5)))
    fixed.load_state_dict(model.state_dict())
    ids = torch.randint(0, 50, (2, 40), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        base = model(ids)
        with model.window_offset(5):
            assert _offsets(model) == [5, 5]
            shifted = model(ids)
        assert _offsets(model) == [0, 4]
        torch.testing.assert_close(shifted, fixed(ids), rtol=0, atol=0)
        torch.testing.assert_close(model(ids), base, rtol=0, atol=0)
    assert not torch.allclose(shifted, base)
    with pytest.raises(ValueError, match=r"window offset must be an integer in \[0, stride=8\), got 8"):
        with model.window_offset(8):
            pass
    with pytest.raises(ValueError, match="needs a compressed model"):
        with _model("full-1kv").window_offset(0):
            pass


@pytest.mark.parametrize("name", NEW_PRESETS)
def test_checkpoint_round_trips_the_new_options(name, tmp_path):
    model = _model(name, seed=4)
    save_checkpoint(model, tmp_path / "ckpt")
    loaded = load_checkpoint(tmp_path / "ckpt").eval()
    assert loaded.config == model.config and _offsets(loaded) == _offsets(model)
    ids = torch.randint(0, 50, (1, 30))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids), model(ids), rtol=0, atol=0)


@pytest.mark.parametrize("name", NEW_PRESETS)
def test_scoring_fast_path_equals_the_full_forward(name):
    model = _model(name, seed=5)
    ids = torch.randint(0, 50, (2, 41), generator=torch.Generator().manual_seed(4))
    positions = torch.tensor([[17, 30, 40], [9, 22, 38]])
    with torch.no_grad():
        full = model(ids).gather(1, positions[..., None].expand(-1, -1, 50))
        torch.testing.assert_close(model(ids, positions=positions), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "preset, problem",
    [
        ("w8s8-1kv", None),
        ("w8s8-1kv-stagger", None),
        ("w9s8-1kv", "needs W = S"),
        ("w8s8-1kv-uniform", "needs learned gates"),
        ("full-1kv", "has full attention"),
        ("dsv4", "paper-style compressors, not 'dsv4'"),
        ("dsv4-mix", "paper-style compressors"),
    ],
)
def test_gate_cycling_is_defined_for_paper_style_w_equal_s_with_learned_gates(preset, problem):
    from phasekv.studies.cycle.cycling import check_cyclable, cycling_problem

    found = cycling_problem(preset_config(preset, vocab_size=50))
    assert found is None if problem is None else problem in found
    if problem:
        with pytest.raises(ValueError, match=problem.replace("'", ".")):
            check_cyclable(PhaseKVModel(preset_config(preset, vocab_size=50)))


def _cache_bytes(model: PhaseKVModel, length: int) -> int:
    cache = KVCache.for_model(model)
    with torch.no_grad():
        prefill(model, torch.randint(0, 50, (1, length), generator=torch.Generator().manual_seed(0)), cache, 13)
    return cache.nbytes()


@pytest.mark.parametrize("name", OFFSET_DESIGNS)
def test_offset_designs_grow_the_cache_by_w8s8_bytes_per_token(name):
    """Measured on the decode cache (past the local window and the first windows): 64 B per token, float32,
    as W8/S8 · 1 KV: 2 layers x one entry (K and V, 32 channels) per 8 tokens."""
    per_token = [(_cache_bytes(m, 200) - _cache_bytes(m, 72)) / 128 for m in (_model(name), _model("w8s8-1kv"))]
    assert per_token == [64.0, 64.0]


def _compressor(cfg: PaperCompression, seed: int = 0) -> PaperCompressor:
    return randomize(PaperCompressor(16, 1, 8, cfg), seed=seed).eval()


@pytest.mark.parametrize("window", [8, 9])
def test_offset_shared_compressor_stores_one_gate_and_payload_and_ignores_order_in_a_window(window):
    shared = _compressor(PaperCompression(window, 8, offset_sharing=True))
    assert shared.payload.shape[0] == shared.gate_weight.shape[0] == shared.gate_bias.shape[0] == 1
    per_offset = _compressor(PaperCompression(window, 8))
    h = torch.randn(1, 32, 16, generator=torch.Generator().manual_seed(1))
    swapped = h.clone()
    swapped[:, [9, 13]] = h[:, [13, 9]]  # two tokens of window 1 trade offsets
    with torch.no_grad():
        base, moved = shared(h).key, shared(swapped).key
        torch.testing.assert_close(moved[:, 1], base[:, 1], rtol=1e-6, atol=1e-6)  # nothing knows the offset
        assert not torch.allclose(per_offset(swapped).key[:, 1], per_offset(h).key[:, 1])  # per-offset C_i, Z_i do


def test_sigmoid_gates_do_not_compete_for_weight():
    cfg = PaperCompression(8, 8, gate_norm="sigmoid")
    comp = _compressor(cfg)
    h = torch.randn(2, 24, 16, generator=torch.Generator().manual_seed(2))
    name = "hook_gate_key"
    with torch.no_grad(), capture(comp, [name]) as before:
        comp(h)
    with torch.no_grad():
        comp.gate_bias[3] += 5.0  # open offset 3 wider
    with torch.no_grad(), capture(comp, [name]) as after:
        comp(h)
    a, b = before[name][0][..., 0, 0], after[name][0][..., 0, 0]  # [B, n, W]
    assert (a > 0).all() and (a < 1 / 8).all() and not torch.allclose(a.sum(-1), torch.ones(()))
    others = [i for i in range(8) if i != 3]
    torch.testing.assert_close(b[..., others], a[..., others], rtol=0, atol=0)  # no other offset lost weight
    assert (b[..., 3] > a[..., 3]).all()
    with pytest.raises(ConfigError, match="needs learned gates"):
        PaperCompression(8, 8, gate="uniform", gate_norm="sigmoid")


def test_sigmoid_gate_metrics_read_shares_of_the_window():
    from phasekv.internals.concentration import gate_shares

    alpha = torch.tensor([[0.1, 0.1, 0.0, 0.2], [0.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(gate_shares(alpha, 1, "sigmoid"), torch.tensor([[0.25, 0.25, 0.0, 0.5], [0.0] * 4]))
    assert gate_shares(alpha, 1, "softmax") is alpha


def test_tied_overlap_gate_gives_a_token_the_same_logit_in_both_windows():
    cfg = PaperCompression(9, 8, tie_overlap_gate=True)
    comp = _compressor(cfg)
    assert comp.gate_weight.shape[0] == 8 and comp.payload.shape[0] == 9  # payload maps stay per offset
    gate_weight, gate_bias = comp._gates()
    assert torch.equal(gate_weight[8], gate_weight[0]) and torch.equal(gate_bias[8], gate_bias[0])
    h = torch.randn(1, 33, 16, generator=torch.Generator().manual_seed(3))
    # the same as an untied W9/S8 compressor whose slot-8 gate is a copy of slot 0's
    untied = _compressor(PaperCompression(9, 8), seed=0)
    with torch.no_grad():
        untied.gate_weight[:8].copy_(comp.gate_weight)
        untied.gate_bias[:8].copy_(comp.gate_bias)
        untied.gate_weight[8].copy_(comp.gate_weight[0])
        untied.gate_bias[8].copy_(comp.gate_bias[0])
        untied.payload.copy_(comp.payload)
        torch.testing.assert_close(untied(h).key, comp(h).key, rtol=0, atol=0)
        untied.gate_bias[8] += 1.0
        assert not torch.allclose(untied(h).key, comp(h).key)
    for bad, match in (
        (dict(window=8, stride=8, tie_overlap_gate=True), "needs overlapping windows"),
        (dict(window=9, stride=8, tie_overlap_gate=True, offset_sharing=True), "already the same"),
        (dict(window=8, stride=4, kind="dsv4", offset_sharing=True), "options of kind 'paper'"),
    ):
        with pytest.raises(ConfigError, match=match):
            compression_from_dict(bad)


def test_gate_cycling_is_not_defined_for_an_offset_shared_gate():
    from phasekv.studies.cycle.cycling import cycling_problem

    assert "per-offset gates" in cycling_problem(preset_config("w8s8-1kv-offset-shared", vocab_size=50))
    assert cycling_problem(preset_config("w8s8-1kv-sigmoid", vocab_size=50)) is None
