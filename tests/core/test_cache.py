import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import randomize
from phasekv.cache import KVCache, generate
from phasekv.cache.generate import prefill
from phasekv.model import PRESETS, PhaseKVModel, preset_config

_MODELS: dict[str, PhaseKVModel] = {}


def _model(name: str) -> PhaseKVModel:
    if name not in _MODELS:
        _MODELS[name] = randomize(PhaseKVModel(preset_config(name, vocab_size=64)), seed=11, std=0.1).eval()
    return _MODELS[name]


def _max_decode_error(model, ids, chunk_size=None):
    with torch.no_grad():
        parallel = model(ids)
        cache = KVCache.for_model(model)
        if chunk_size is None:  # prefill half, then one token at a time
            half = ids.shape[1] // 2
            steps = [prefill(model, ids[:, :half], cache)] if half else []
            steps += [model(ids[:, t : t + 1], cache) for t in range(half, ids.shape[1])]
            incremental = torch.cat(steps, dim=1)
        else:
            incremental = prefill(model, ids, cache, chunk_size)
    return (parallel - incremental).abs().max().item()


@pytest.mark.parametrize("name", list(PRESETS))
def test_decode_logits_equal_parallel_forward_for_every_preset(name):
    model = _model(name)
    gen = torch.Generator().manual_seed(0)
    worst = 0.0
    for length in (1, 3, 4, 7, 8, 9, 16, 23, 24, 40):  # multiples of S and not
        ids = torch.randint(0, 64, (2, length), generator=gen)
        worst = max(worst, _max_decode_error(model, ids), _max_decode_error(model, ids, chunk_size=5))
    print(f"{name}: max abs logit diff decode vs parallel {worst:.2e}")
    assert worst < 1e-5


def _strides(cfg) -> list[int]:
    """The compression strides of a model's layers (none for full attention)."""
    strides = set() if cfg.compression is None else {cfg.compression.stride}
    if cfg.dsv4 is not None and "hca" in cfg.dsv4.layer_types:
        strides.add(cfg.dsv4.hca_rate)
    return sorted(strides)


LONG = 160  # with the tiny presets' W8/S4 windows a CSA query sees ~40 entries, five times the indexer's top 8


@pytest.mark.parametrize("name", list(PRESETS))
def test_long_decode_and_chunked_prefill_equal_the_parallel_forward_for_every_preset(name):
    """float64, long enough that the top-k presets' indexer chooses among many more entries than it keeps
    (and its ReLU scores tie at exactly zero): token-by-token decoding and chunked prefill at chunk sizes
    around each stride, an odd one and a large one must reproduce the parallel forward's logits."""
    model = randomize(PhaseKVModel(preset_config(name, vocab_size=64)), seed=11, std=0.1).eval().double()
    ids = torch.randint(0, 64, (2, LONG), generator=torch.Generator().manual_seed(0))
    chunks = {7, 61} | {c for s in _strides(model.config) for c in (s - 1, s, s + 1)}
    with torch.no_grad():
        parallel = model(ids)
        cache = KVCache.for_model(model)
        modes = {"decode": torch.cat([model(ids[:, t : t + 1], cache) for t in range(LONG)], dim=1)}
        for chunk in sorted(chunks - {0}):
            modes[f"chunk {chunk}"] = prefill(model, ids, KVCache.for_model(model), chunk)
    errors = {mode: (logits - parallel).abs().max().item() for mode, logits in modes.items()}
    print(f"{name}: max abs logit diff vs parallel " + ", ".join(f"{m} {e:.1e}" for m, e in errors.items()))
    assert max(errors.values()) < 1e-10, errors


@settings(max_examples=25, deadline=None)
@given(
    name=st.sampled_from(
        ["w8s8-1kv", "w8s4-1kv", "w12s12-4kv", "dsv4", "full-4kv", "w8s8-1kv-stagger", "w8s8-1kv-shift"]
    ),
    length=st.integers(1, 60),
    chunk=st.integers(1, 20),
    seed=st.integers(0, 10_000),
)
def test_chunked_prefill_matches_parallel_forward(name, length, chunk, seed):
    ids = torch.randint(0, 64, (1, length), generator=torch.Generator().manual_seed(seed))
    assert _max_decode_error(_model(name), ids, chunk_size=chunk) < 1e-5


def test_generate_is_greedy_and_consistent_with_the_parallel_forward():
    model = _model("w8s4-1kv")
    prompt = torch.randint(0, 64, (2, 13), generator=torch.Generator().manual_seed(1))
    tokens, logits = generate(model, prompt, max_new_tokens=12, chunk_size=4, return_logits=True)
    assert tokens.shape == (2, 25) and torch.equal(tokens[:, :13], prompt)
    with torch.no_grad():
        parallel = model(tokens[:, :-1])
    torch.testing.assert_close(logits, parallel, rtol=1e-5, atol=1e-5)
    assert torch.equal(parallel[:, 12:].argmax(-1), tokens[:, 13:])


def test_cache_holds_about_t_over_s_entries_not_t():
    model = _model("w8s8-1kv")
    cache = KVCache.for_model(model)
    length = 203
    with torch.no_grad():
        prefill(model, torch.randint(0, 64, (1, length)), cache, chunk_size=50)
    local = model.config.compression.local_window
    for state in cache.layers:
        assert state.num_entries == (length - 8) // 8 + 1 == 25
        assert state.exact_k.shape[1] == local - 1  # only what a later query can still reach
        assert state.hidden.shape[1] == 7  # the unfinished window
    full = _model("full-1kv")
    full_cache = KVCache.for_model(full)
    with torch.no_grad():
        prefill(full, torch.randint(0, 64, (1, length)), full_cache)
    ratio = cache.nbytes() / full_cache.nbytes()
    assert ratio < (25 + 15) / 203 + 1e-9  # (entries + exact rows) / T, roughly 1/S
