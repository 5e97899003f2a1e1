"""Grids staggered across KV heads (stagger="kv_head"): KV head h of n writes its windows h*S//n later, so each
phase ends a window for only some heads. The fused compressor path against the plain one and the reference twin,
the layer against its reference, every execution mode against the parallel forward, the moving grid, checkpoints,
and the cache bytes of the unstaggered model."""

from __future__ import annotations

import pytest
import torch

from conftest import randomize
from phasekv.attention.reference import reference_layer
from phasekv.cache import KVCache
from phasekv.cache.generate import prefill
from phasekv.compress import PaperCompression, PaperCompressor, join_head_calls
from phasekv.compress import paper as paper_module
from phasekv.compress.reference import reference_entries
from phasekv.config import ConfigError, compression_from_dict
from phasekv.hooks import capture
from phasekv.internals.gate_metrics import collect_gates
from phasekv.model import PhaseKVModel, load_checkpoint, preset_config, save_checkpoint

STAGGERED = {"w8s8-4kv-head-stagger": 4, "w8s8-8kv-head-stagger": 8}
# the unstaggered model with the same KV heads (the CPU profile's "W8/S8 · 4 KV" is w8s8-8kv with 4 KV heads)
UNSTAGGERED = {"w8s8-4kv-head-stagger": {"num_kv_heads": 4}, "w8s8-8kv-head-stagger": {}}


def _model(name: str, seed: int = 1, **overrides) -> PhaseKVModel:
    return randomize(PhaseKVModel(preset_config(name, vocab_size=50, **overrides)), seed=seed, std=0.1).eval()


def _head_offsets(model: PhaseKVModel) -> list[list[int]]:
    comps = [layer.self_attn.compressor for layer in model.layers]
    return [[c.head_geometry(h).offset for h in range(c.kv_heads)] for c in comps]


def test_kv_head_h_of_n_starts_its_windows_at_h_s_over_n():
    assert PaperCompression(8, 8, stagger="kv_head").head_offsets(4) == (0, 2, 4, 6)
    assert PaperCompression(8, 8, stagger="kv_head").head_offsets(8) == tuple(range(8))
    assert PaperCompression(8, 8).head_offsets(4) == (0, 0, 0, 0)
    assert _head_offsets(_model("w8s8-4kv-head-stagger")) == [[0, 2, 4, 6]] * 2
    # every phase is the last slot of a window (a boundary) for one KV head of four, not for all
    comp = _model("w8s8-4kv-head-stagger").layers[0].self_attn.compressor
    last_slots = [int(comp.head_geometry(h).window_end(0)) % 8 for h in range(4)]
    assert last_slots == [7, 1, 3, 5]
    moved = PaperCompression(8, 8, stagger="kv_head", offsets=(3, 0))
    with_layer_offsets = _model("w8s8-4kv-head-stagger", compression=moved)
    assert _head_offsets(with_layer_offsets) == [[3, 5, 7, 1], [0, 2, 4, 6]]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(window=8, stride=4, kind="dsv4", stagger="kv_head"), "paper-style"),
        (dict(window=8, stride=8, stagger="layer", offsets=(1, 2)), "not both"),
    ],
)
def test_config_rejects_what_a_head_stagger_cannot_be(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        compression_from_dict(kwargs)


def test_a_staggered_compressor_writes_one_head_per_call():
    comp = PaperCompressor(16, 4, 8, PaperCompression(8, 8, stagger="kv_head"))
    with pytest.raises(ValueError, match="pass head="):
        comp(torch.zeros(1, 20, 16))
    # positions 0..19: head 0's windows end at 7 and 15, head 3's (offset 6) at 13 (21 is not complete)
    assert comp(torch.zeros(1, 20, 16), head=0).key.shape == (1, 2, 1, 8)
    assert comp(torch.zeros(1, 20, 16), head=3).key.shape == (1, 1, 1, 8)


@pytest.mark.parametrize("kwargs", [dict(window=8, stride=8), dict(window=9, stride=8, gate="vector")], ids=str)
@pytest.mark.parametrize("piecewise", [False, True])
def test_fused_and_plain_head_entries_match_the_reference_twin(kwargs, piecewise, monkeypatch):
    """float64: per KV head, the fused pooling (values and gradients) equals the plain path, and both equal the
    entries computed from the formulas on that head's grid."""
    comp = PaperCompressor(16, 4, 8, PaperCompression(**kwargs, stagger="kv_head"))
    comp = randomize(comp, seed=4).double()
    h = torch.randn(2, 37, 16, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    start = 9 if piecewise else 0
    emit_from = start + comp.context if piecewise else 0
    for head in range(4):
        results = {}
        for pooling in ("plain", "fused"):
            monkeypatch.setattr(paper_module, "POOLING", pooling)
            comp.zero_grad()
            x = h[:, start:].clone().requires_grad_(True)
            entries = comp(x, start, emit_from, head=head)
            weights = torch.randn(entries.key.shape, generator=torch.Generator().manual_seed(9), dtype=h.dtype)
            ((entries.key + 2 * entries.value) * weights).sum().backward()
            results[pooling] = [entries.key, entries.value, x.grad] + [p.grad for p in comp.parameters()]
        for want, got in zip(results["plain"], results["fused"], strict=True):
            torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
        key, value = reference_entries(comp, h, head)
        n = results["plain"][0].shape[1]
        assert n > 0
        with torch.no_grad():
            torch.testing.assert_close(results["plain"][0], key[:, key.shape[1] - n :], rtol=1e-10, atol=1e-12)
            torch.testing.assert_close(results["plain"][1], value[:, value.shape[1] - n :], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", list(STAGGERED))
@pytest.mark.parametrize("grid", [None, 3])
def test_layer_matches_the_reference_built_from_the_definitions(name, grid):
    """float64; also with the layer's grid moved (`window_offset`: every head's grid moves with it)."""
    model = _model(name).double()
    x = torch.randn(2, 37, model.config.hidden_size, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    with torch.no_grad():
        for layer in model.layers:
            attn = layer.self_attn
            if grid is None:
                torch.testing.assert_close(attn(x), reference_layer(attn, x), rtol=1e-10, atol=1e-10)
                continue
            with model.window_offset(grid):
                torch.testing.assert_close(attn(x), reference_layer(attn, x), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("name", list(STAGGERED))
def test_decode_and_chunked_prefill_equal_the_parallel_forward(name):
    """float64: token-by-token decoding, chunked prefill at chunk sizes around S (and an odd and a large one),
    prefill then decode, a fork, and the scoring fast path all reproduce the parallel forward's logits."""
    model = _model(name).double()
    ids = torch.randint(0, 50, (2, 75), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        parallel = model(ids)
        cache = KVCache.for_model(model)
        modes = {"decode": torch.cat([model(ids[:, t : t + 1], cache) for t in range(75)], dim=1)}
        for chunk in (1, 3, 7, 8, 9, 61):
            modes[f"chunk {chunk}"] = prefill(model, ids, KVCache.for_model(model), chunk)
        head = KVCache.for_model(model)
        first = prefill(model, ids[:, :30], head, 11)
        fork = head.fork()
        modes["prefill + decode"] = torch.cat([first, *(model(ids[:, t : t + 1], head) for t in range(30, 75))], 1)
        modes["fork"] = torch.cat([first, prefill(model, ids[:, 30:], fork, 6)], dim=1)
        positions = torch.tensor([[17, 40, 74], [9, 33, 70]])
        modes["scoring"] = model(ids, positions=positions)
        parallel_at = parallel.gather(1, positions[..., None].expand(-1, -1, parallel.shape[-1]))
    errors = {
        mode: (logits - (parallel_at if mode == "scoring" else parallel)).abs().max().item()
        for mode, logits in modes.items()
    }
    assert max(errors.values()) < 1e-10, errors


def test_staggering_changes_what_the_model_computes():
    staggered = _model("w8s8-4kv-head-stagger")
    plain = _model("w8s8-8kv", num_kv_heads=4)
    plain.load_state_dict(staggered.state_dict())  # the same parameters, names and shapes
    ids = torch.randint(0, 50, (1, 40), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert not torch.allclose(staggered(ids), plain(ids))
    assert staggered.num_parameters() == plain.num_parameters()


@pytest.mark.parametrize("name", list(STAGGERED))
def test_checkpoint_round_trips_the_stagger(name, tmp_path):
    model = _model(name, seed=4)
    save_checkpoint(model, tmp_path / "ckpt")
    loaded = load_checkpoint(tmp_path / "ckpt").eval()
    assert loaded.config == model.config and loaded.config.compression.stagger == "kv_head"
    assert _head_offsets(loaded) == _head_offsets(model)
    ids = torch.randint(0, 50, (1, 45))
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids), model(ids), rtol=0, atol=0)


def _cache(model: PhaseKVModel, length: int) -> KVCache:
    cache = KVCache.for_model(model)
    with torch.no_grad():
        prefill(model, torch.randint(0, 50, (1, length), generator=torch.Generator().manual_seed(0)), cache, 13)
    return cache


@pytest.mark.parametrize("name", list(STAGGERED))
def test_cache_grows_by_the_unstaggered_models_bytes_per_token(name):
    """Measured on the decode cache past the local window and the first windows: n_kv x 2 layers x one entry
    (K and V, 32 float32 channels) per 8 tokens, as the unstaggered model with the same KV heads."""
    staggered, plain = _model(name), _model("w8s8-8kv", **UNSTAGGERED[name])
    kv = STAGGERED[name]
    per_token = [(_cache(m, 200).nbytes() - _cache(m, 72).nbytes()) / 128 for m in (staggered, plain)]
    assert per_token == [kv * 2 * 2 * 32 * 4 / 8] * 2
    # at any length each head holds the unstaggered count of entries or one fewer (its windows end later)
    for length in (72, 75, 200):
        counts = [len(s.entry_end) for state in _cache(staggered, length).layers for s in state.heads]
        unstaggered = _cache(plain, length).num_entries()[0]
        assert set(counts) <= {unstaggered, unstaggered - 1}
        assert _cache(staggered, length).nbytes() <= _cache(plain, length).nbytes()


def test_gate_hooks_fire_once_per_kv_head_and_the_gate_metrics_join_them():
    model = _model("w8s8-4kv-head-stagger")
    ids = torch.randint(0, 50, (2, 40), generator=torch.Generator().manual_seed(1))
    name = "layers.0.self_attn.compressor.hook_gate_key"
    with torch.no_grad(), capture(model, [name]) as seen:
        model(ids)
    assert [tuple(a.shape) for a in seen[name]] == [(2, 5, 8, 1, 1), (2, 4, 8, 1, 1), (2, 4, 8, 1, 1), (2, 4, 8, 1, 1)]
    assert join_head_calls(seen[name]).shape == (2, 4, 8, 4, 1)
    gates = collect_gates(model, [ids])
    assert gates[(0, "key")].shape == (8, 8, 4, 1)  # 2 sequences x 4 windows every head completes
