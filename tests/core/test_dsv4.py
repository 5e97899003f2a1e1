"""DeepSeek-V4 attention layers: parity with transformers' DeepseekV4Attention (parallel and cached), the
indexer's top-k against its per-query twin, the gathered attention against its reference, indexer training."""

import pytest
import torch

from conftest import randomize
from phasekv.attention.dsv4_indexer import NO_ENTRY, select_top_k
from phasekv.attention.dsv4_layer import (
    DSV4Attention,
    gathered_attention,
    transformers_state_dict,
)
from phasekv.attention.reference import reference_gathered_attention, reference_select_top_k
from phasekv.model import PhaseKVModel, preset_config
from phasekv.studies.conformance.dsv4_layers import LAYER_KINDS as TYPES
from phasekv.studies.conformance.dsv4_layers import TOP_K, layer_pair
from phasekv.studies.conformance.dsv4_layers import transformers_layer_call as _hf_call
from phasekv.studies.conformance.dsv4_layers import twin_configs as _configs

PARITY_TOLERANCE = 1e-5  # fp32, outputs of size ~1


def _has_deepseek_v4() -> bool:
    try:
        import transformers.models.deepseek_v4.modeling_deepseek_v4  # noqa: F401
    except ImportError:
        return False
    return True


needs_hf = pytest.mark.skipif(not _has_deepseek_v4(), reason="the installed transformers has no deepseek_v4 model")


def _pair(kind: str, seed: int = 0):
    """(transformers' DeepseekV4Attention, our DSV4Attention) of layer type `kind` with the same random weights."""
    return layer_pair(kind, seed)


@needs_hf
@pytest.mark.parametrize("kind", list(TYPES))
def test_layer_equals_transformers_deepseek_v4_attention(kind):
    hf, ours, hf_cfg = _pair(kind)
    gen = torch.Generator().manual_seed(1)
    worst = 0.0
    for length in (1, 5, 8, 23, 41):
        x = torch.randn(2, length, 64, generator=gen)
        with torch.no_grad():
            expected, got = _hf_call(hf, hf_cfg, x, 0), ours(x)
        assert expected.abs().max() > 0.1
        worst = max(worst, (expected - got).abs().max().item())
    print(f"dsv4 {kind} layer vs transformers DeepseekV4Attention (parallel): max abs diff {worst:.2e}")
    assert worst < PARITY_TOLERANCE


@needs_hf
@pytest.mark.parametrize("kind", list(TYPES))
def test_gradients_equal_transformers_deepseek_v4_attention(kind):
    """The backward pass too: gradients of a weighted sum of the outputs with respect to the input and to every
    weight agree with transformers' (fp32; the indexer gets none in either: its picks are not differentiable)."""
    hf, ours, hf_cfg = _pair(kind)
    x = torch.randn(2, 41, 64, generator=torch.Generator().manual_seed(1))
    weights = torch.randn(2, 41, 64, generator=torch.Generator().manual_seed(2))
    x_hf, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()
    (_hf_call(hf, hf_cfg, x_hf, 0) * weights).sum().backward()
    (ours(x_ours) * weights).sum().backward()
    torch.testing.assert_close(x_ours.grad, x_hf.grad, rtol=1e-4, atol=1e-4)
    expected = transformers_state_dict(
        {n: torch.zeros_like(p) if p.grad is None else p.grad for n, p in hf.named_parameters()}
    )
    got = {n: torch.zeros_like(p) if p.grad is None else p.grad for n, p in ours.named_parameters()}
    assert set(got) == set(expected)
    worst = max((got[n] - expected[n]).abs().max().item() for n in got)
    print(f"dsv4 {kind} layer gradients vs transformers: max abs diff {worst:.2e}")
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    assert any(g.abs().max() > 0.1 for g in got.values())


@needs_hf
@pytest.mark.parametrize("kind", list(TYPES))
def test_cached_decoding_equals_transformers_caches(kind):
    """Prefill 13 tokens, then one at a time, against DeepseekV4CSACache / HCACache / the sliding cache."""
    from transformers import DynamicCache

    from phasekv.attention import LayerState

    hf, ours, hf_cfg = _pair(kind, seed=3)
    x = torch.randn(2, 37, 64, generator=torch.Generator().manual_seed(2))
    cache, state = DynamicCache(config=hf_cfg), LayerState()
    expected, got = [], []
    with torch.no_grad():
        for start, stop in [(0, 13)] + [(t, t + 1) for t in range(13, 37)]:
            expected.append(_hf_call(hf, hf_cfg, x[:, start:stop], start, cache))
            got.append(ours(x[:, start:stop], start, state))
        parallel = ours(x)
    expected, got = torch.cat(expected, 1), torch.cat(got, 1)
    worst = (expected - got).abs().max().item()
    layer_cache = type(cache.layers[list(TYPES).index(kind)]).__name__
    print(f"dsv4 {kind} cached decoding vs transformers ({layer_cache}): max abs diff {worst:.2e}")
    assert worst < PARITY_TOLERANCE
    torch.testing.assert_close(got, parallel, rtol=1e-5, atol=1e-5)


def test_top_k_selection_equals_its_per_query_reference():
    gen = torch.Generator().manual_seed(5)
    scores = torch.randn(2, 30, 9, generator=gen).relu()  # ReLU: ties at 0, as the indexer's scores have
    scores[0, :, 4] = scores[0, :, 6] = 0.5  # ties above zero too
    ends = torch.arange(9) * 4 + 3
    visible = ends[None, None, :] <= torch.arange(30)[None, :, None]
    for k in (1, 3, 4, 9, 12):
        picks = select_top_k(scores, visible, k)
        assert picks.shape == (2, 30, min(k, 9))
        expected = reference_select_top_k(scores, visible, k)
        for b in range(2):
            for t in range(30):
                got = [int(j) for j in picks[b, t] if int(j) != NO_ENTRY]
                assert set(got) == expected[b][t]  # ties go to the lower row, exactly
                assert got == sorted(got, key=lambda j, b=b, t=t: (-float(scores[b, t, j]), j))
                assert all(int(j) == NO_ENTRY for j in picks[b, t, len(got) :])
    assert (select_top_k(scores, visible, 3)[:, :3] == NO_ENTRY).all()  # nothing visible before position 3


def test_top_k_picks_do_not_depend_on_how_many_later_entries_the_scores_hold():
    """A decoding step scores only the entries written so far, the parallel forward every entry of the
    sequence (the later ones masked): the picks among the visible entries must be the same."""
    gen = torch.Generator().manual_seed(7)
    scores = torch.randn(1, 1, 40, generator=gen).relu().double()  # about half are exact zeros
    visible = torch.zeros(1, 1, 40, dtype=torch.bool)
    visible[..., :25] = True
    for k in (1, 5, 8, 20, 25, 30):
        full = select_top_k(scores, visible, k)
        for n in (25, 26, 33, 40):
            part = select_top_k(scores[..., :n], visible[..., :n], k)
            strip = [int(j) for j in part[0, 0] if int(j) != NO_ENTRY]
            assert strip == [int(j) for j in full[0, 0] if int(j) != NO_ENTRY]


def test_gathered_attention_equals_its_reference_and_compressed_attention_when_every_entry_is_picked():
    from phasekv.attention import KVView, reference_compressed_attention

    gen = torch.Generator().manual_seed(6)
    q, entries = torch.randn(2, 12, 4, 8, generator=gen), torch.randn(2, 7, 1, 8, generator=gen)
    exact, sink = torch.randn(2, 20, 1, 8, generator=gen), torch.randn(4, generator=gen)
    start, exact_start, window = 8, 3, 6
    ends = torch.arange(7) * 3 + 2
    kv = KVView(entries, entries, ends, exact, exact, exact_start, window, sink)  # one shared K=V head
    visible = ends[None, :] <= (start + torch.arange(12))[:, None]
    every = torch.where(visible, torch.arange(7), NO_ENTRY).expand(2, 12, 7)
    some = select_top_k(torch.randn(2, 12, 7, generator=gen), visible[None], 2)
    for picks in (every, some):
        z, probs = gathered_attention(q, start, kv, picks)
        torch.testing.assert_close(z, reference_gathered_attention(q, start, kv, picks))
        assert probs.shape == (2, 12, 4, picks.shape[-1] + window) and (probs.sum(-1) < 1).all()  # the sink's share
    torch.testing.assert_close(gathered_attention(q, start, kv, every)[0], reference_compressed_attention(q, start, kv))
    tail = exact[:, 5:]
    late = KVView(entries, entries, ends, tail, tail, exact_start + 5, window, sink)
    with pytest.raises(ValueError, match="need earlier ones"):
        gathered_attention(q, start, late, every)
    with pytest.raises(ValueError, match="shared K=V head"):
        gathered_attention(q, start, KVView(entries, entries.clone(), ends, exact, exact, exact_start, window), every)


def test_top_k_changes_what_a_csa_layer_reads():
    """With fewer picks than visible entries the output differs from reading every entry (the test above
    pins what it equals); a hook that replaces the picks is what the layer attends to."""
    _, cfg = _configs()
    layer = randomize(DSV4Attention(cfg, 1), seed=7).eval()
    x = torch.randn(1, 41, 64, generator=torch.Generator().manual_seed(8))
    from phasekv.hooks import capture, hooks

    with torch.no_grad(), capture(layer, ["indexer.hook_index_selection", "indexer.hook_index_scores"]) as seen:
        base = layer(x)
    picks, scores = seen["indexer.hook_index_selection"][0], seen["indexer.hook_index_scores"][0]
    assert picks.shape == (1, 41, TOP_K) and scores.shape == (1, 41, 10)
    assert torch.isinf(scores[0, 2]).all() and torch.isfinite(scores[0, 40]).all()  # padded window -1: from 3 on
    visible = layer.compressor.geometry.window_end(torch.arange(-1, 9))[None, :] <= torch.arange(41)[:, None]
    every = torch.where(visible, torch.arange(10), NO_ENTRY)[None]
    with torch.no_grad(), hooks(layer, {"indexer.hook_index_selection": lambda picks, name: every}):
        read_all = layer(x)
    torch.testing.assert_close(read_all[:, : 4 * TOP_K + 3], base[:, : 4 * TOP_K + 3])  # <= k entries visible
    assert (read_all[:, -1] - base[:, -1]).abs().max() > 1e-4


def test_indexer_learns_from_its_kl_loss_only():
    """The LM loss does not reach the indexer (picks are not differentiable); its KL to the attention does,
    and the rest of the layer gets no gradient from that KL (detached inputs)."""
    torch.manual_seed(9)
    model = PhaseKVModel(preset_config("dsv4-csa", vocab_size=40)).train()
    ids = torch.randint(0, 40, (2, 48))
    index = [n for n, _ in model.named_parameters() if ".indexer." in n]
    model(ids).logsumexp(-1).mean().backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert all(grads[n] is not None and grads[n].abs().sum() > 0 for n in index)
    model.zero_grad()
    off = preset_config("dsv4-csa", vocab_size=40)
    quiet = PhaseKVModel(
        type(off).from_dict({**off.to_dict(), "dsv4": {**off.to_dict()["dsv4"], "indexer_loss_weight": 0}})
    )
    quiet.load_state_dict(model.state_dict())
    quiet.train()(ids).logsumexp(-1).mean().backward()
    assert all(p.grad is None or p.grad.abs().sum() == 0 for n, p in quiet.named_parameters() if ".indexer." in n)
    others = {n: p.grad for n, p in quiet.named_parameters() if ".indexer." not in n}
    torch.testing.assert_close({n: g for n, g in grads.items() if n in others}, others)  # the KL adds nothing there


def test_topk_hits_by_phase_counts_picks_that_cover_the_target():
    from phasekv.hooks import hooks
    from phasekv.internals.topk import target_picked, topk_hits_by_phase
    from phasekv.tasks.prompts import Prompt

    torch.manual_seed(10)
    model = PhaseKVModel(preset_config("dsv4-mix", vocab_size=40)).eval()
    ids = torch.randint(0, 40, (1, 40)).tolist()[0]
    prompts = [Prompt(ids, [1], target, 39, target % 4, 0, 0) for target in (4, 5, 9, 30)]
    # Pin the picks at the query: entry rows 2 and 3 (windows 1 and 2, positions 4..11 and 8..15).
    pinned = torch.tensor([2, 3, NO_ENTRY] + [NO_ENTRY] * (8 - 3))

    def pin(picks, name):
        picks = picks.clone()
        picks[:, 39] = pinned[: picks.shape[-1]]
        return picks

    with hooks(model, {"layers.1.self_attn.indexer.hook_index_selection": pin}):
        hit = target_picked(model, prompts)
        rows = topk_hits_by_phase(model, prompts)
    assert list(hit) == [1] and hit[1].tolist() == [True, True, True, False]
    phase = {r["value"]: r["rate"] for r in rows if r["group"] == "phase"}
    assert phase == {0: 1.0, 1: 1.0, 2: 0.0}
    assert topk_hits_by_phase(PhaseKVModel(preset_config("w8s4-1kv", vocab_size=40)), prompts) == []


def test_gate_plot_takes_layers_of_different_strides(tmp_path):
    from phasekv.studies.gates.figure import plane_block, plot_gates, spec

    rows = [
        {"layer": i, "kv_head": 0, "branch": "key", "window": w, "static_offsets": 2.0, "per_window_offsets": 1.5,
         "phase_share": [1.0] * s}
        for i, (w, s) in enumerate([(8, 4), (16, 16)])
    ]  # fmt: skip
    assert plot_gates(rows, tmp_path / "gates.png").read_bytes().startswith(b"\x89PNG")
    plane = plane_block(rows, "gates")
    assert plane["window"] == 16  # the plane spans the widest window
    assert [(h["label"], h["x"], h["y"]) for h in plane["heads"]] == [("L0H0", 2.0, 1.5), ("L1H0", 2.0, 1.5)]
    phases = {label: [s["phase"] for s in plane["shares"] if s["label"] == label] for label in ("L0H0", "L1H0")}
    assert phases == {"L0H0": list(range(4)), "L1H0": list(range(16))}  # each layer its own stride's phases
    data = spec(plane)["data"]["values"]
    assert sum(d["kind"] == "share" for d in data) == 20 and {"kind": "diagonal", "x": 16, "y": 16} in data


def _with_topk(cfg, top_k: int):
    return type(cfg).from_dict({**cfg.to_dict(), "dsv4": {**cfg.to_dict()["dsv4"], "index_topk": top_k}})


def test_dense_indexer_reads_every_entry_and_trains_the_indexer_on_that_attention():
    """Inside `dense_indexer()` a CSA model equals the same weights with a top-k above the entry count (every
    visible entry read); the indexer still gets its KL gradient; top-k reads return on exit, also after an error."""
    torch.manual_seed(11)
    cfg = preset_config("dsv4-csa", vocab_size=40)
    model = PhaseKVModel(cfg).eval()
    every = PhaseKVModel(_with_topk(cfg, 1000)).eval()
    every.load_state_dict(model.state_dict())
    ids = torch.randint(0, 40, (2, 96))  # 23 entries visible at the end, 8 picked
    with torch.no_grad():
        sparse = model(ids)
        with model.dense_indexer():
            dense = model(ids)
        torch.testing.assert_close(dense, every(ids), rtol=1e-5, atol=1e-5)  # same entries, another order
        assert (dense - sparse).abs().max() > 1e-3
        torch.testing.assert_close(model(ids), sparse, rtol=0, atol=0)
    with pytest.raises(RuntimeError), model.dense_indexer():
        raise RuntimeError("interrupted")
    assert not any(getattr(layer.self_attn, "dense", False) for layer in model.layers)
    model.train()
    with model.dense_indexer():
        model(ids).logsumexp(-1).mean().backward()
    index = [p.grad for n, p in model.named_parameters() if ".indexer." in n]
    assert all(g is not None and g.abs().sum() > 0 for g in index)
    with (
        pytest.raises(ValueError, match="needs DeepSeek-V4 CSA layers"),
        PhaseKVModel(preset_config("dsv4-sliding", vocab_size=40)).dense_indexer(),
    ):
        pass
