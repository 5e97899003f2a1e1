"""Training-free KV-cache compression on HF models: the --press spec, phasekv's chunked pooling (against a
per-query float64 reference) and kvpress presses (tests marked `kvpress` need the kvpress extra: they run in
its own environment, `scripts/test_kvpress.sh`, and skip elsewhere)."""

import pytest
import torch

from conftest import HAS_KVPRESS, needs_kvpress, press_inputs, randomize, tiny_qwen3, word_tokenizer
from phasekv.scoring import HFScorer, ScorerError, load_scorer
from phasekv.scoring.pooled import install_pooling
from phasekv.scoring.press_pool import PoolSpec
from phasekv.scoring.press_question import bind_question
from phasekv.scoring.press_spec import (
    PressCall,
    PressSpecError,
    compresses_rows_apart,
    parse_press,
    press_stride,
)
from phasekv.studies.probe.registry import question_tokens
from phasekv.studies.probe.run import run_lookup
from phasekv.tasks.lookup import LookupOptions
from phasekv.tasks.needle import NeedleOptions

LOOKUP = LookupOptions(n_records=12, n_demos=2, modulus=8, n_mappings=2, seed=3)


# --- the spec ---------------------------------------------------------------------------------------


def test_spec_reads_nested_kvpress_calls_and_finds_the_chunk_grid():
    spec = parse_press("ChunkKVPress(press=SnapKVPress(compression_ratio=0.5, window_size=4), chunk_length=8)")
    assert spec == PressCall(
        "ChunkKVPress",
        {"press": PressCall("SnapKVPress", {"compression_ratio": 0.5, "window_size": 4}), "chunk_length": 8},
    )
    assert spec.to_dict()["params"]["press"] == {
        "class": "SnapKVPress",
        "params": {"compression_ratio": 0.5, "window_size": 4},
    }
    assert press_stride(spec) == (8, "ChunkKVPress.chunk_length")
    assert press_stride(parse_press("BlockPress(press=KnormPress(compression_ratio=0.25), block_size=16)"))[0] == 16
    assert press_stride(parse_press("knorm"))[0] is None
    assert press_stride(parse_press("pool-w8s4")) == (4, "pool stride s")
    assert parse_press("pool:w=8, s=4") == PoolSpec(8, 4, 16)


@pytest.mark.parametrize(
    "text",
    [
        "KnormPress(0.5)",  # positional
        "os.system('ls')",  # not a bare class name
        "KnormPress(compression_ratio=__import__('os'))",  # not a literal
        "KnormPress(compression_ratio=x)",
        "KnormPress(",
        "pool:w=8",  # no stride
        "pool:w=8,s=8,local=0",  # nothing visible before the first window completes
        "pool:w=8,s=eight",
        "ChunkKVPress(press=KnormPress(compression_ratio=0.5))",  # the grid must be explicit
    ],
)
def test_bad_specs_are_refused_with_a_reason(text):
    with pytest.raises(PressSpecError):
        spec = parse_press(text)
        press_stride(spec)


# --- phasekv's chunked pooling ----------------------------------------------------------------------


def _tiny(kind: str):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    sizes = dict(vocab_size=40, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4)
    torch.manual_seed(0)
    if kind == "llama":
        model = LlamaForCausalLM(LlamaConfig(**sizes, num_key_value_heads=2, head_dim=8))
    else:
        model = Qwen3ForCausalLM(Qwen3Config(**sizes, num_key_value_heads=2, head_dim=8))
    return randomize(model.eval()).double()


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
@pytest.mark.parametrize(
    ("spec", "offset"), [(PoolSpec(8, 4, 5), 0), (PoolSpec(8, 8, 3), 0), (PoolSpec(3, 5, 2), 0), (PoolSpec(8, 8, 3), 5)]
)
def test_pooled_attention_equals_the_per_query_reference(kind, spec, offset):
    model = _tiny(kind)
    ids = torch.randint(0, 40, (2, 29), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(ids).logits
        install_pooling(model, spec, reference=True, offset=offset)
        reference = model(ids).logits
        install_pooling(model, spec, offset=offset)
        fast = model(ids).logits
    torch.testing.assert_close(fast, reference, rtol=0, atol=1e-10)
    assert (fast - full).abs().max() > 1e-3  # pooling changes the model
    # Before the first window completes a query sees its local tokens only: position 0 attends to itself alone.
    torch.testing.assert_close(fast[:, 0], full[:, 0], rtol=0, atol=1e-10)


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_pooling_one_token_windows_without_local_tokens_is_the_full_model(kind):
    model = _tiny(kind)
    ids = torch.randint(0, 40, (2, 23), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = model(ids).logits
        install_pooling(model, PoolSpec(1, 1, 0))
        pooled = model(ids).logits
    torch.testing.assert_close(pooled, full, rtol=0, atol=1e-10)


def test_pooled_scorer_records_its_stride_and_runs_a_probe(qwen_dir):
    scorer = load_scorer(qwen_dir, press="pool:w=4,s=2,local=3", batch_size=64)
    result = run_lookup(scorer, LOOKUP, n_resamples=50, progress=False)
    assert result["stride"]["value"] == 2
    press = result["model"]["press"]
    assert press["class"] == "phasekv.pool" and press["params"] == {"window": 4, "stride": 2, "local": 3}
    plain = run_lookup(load_scorer(qwen_dir, batch_size=64), LOOKUP, n_resamples=50, progress=False)
    assert result["mean_answer_logprob"] != plain["mean_answer_logprob"]


def test_pooling_grid_offset_moves_the_windows_and_returns(qwen_dir):
    """Shifting the grid by o is pooling the same sequence with windows o + jS: a window [o, o+W) is one entry, and
    positions before o belong to none; on leaving the block the grid is back at 0."""
    scorer = load_scorer(qwen_dir, press="pool:w=4,s=4,local=2")
    ids = torch.randint(0, 40, (1, 19), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        base = scorer.model(ids).logits
        with scorer.grid_offset(3):
            shifted = scorer.model(ids).logits
        again = scorer.model(ids).logits
        with scorer.grid_offset(scorer.unshifted_grid_offset):  # the grid-shift test reuses this grid's scores
            in_place = scorer.model(ids).logits
    torch.testing.assert_close(again, base, rtol=0, atol=0)
    torch.testing.assert_close(in_place, base, rtol=0, atol=0)
    # Until the first window of either grid completes (position 3 at offset 0), both see their local tokens only.
    torch.testing.assert_close(shifted[:, :3], base[:, :3], rtol=0, atol=1e-6)
    assert (shifted[:, 3:] - base[:, 3:]).abs().max() > 1e-4
    with pytest.raises(ValueError, match="offset"), scorer.grid_offset(4):
        pass


def test_press_is_refused_for_phasekv_checkpoints(phasekv_dir):
    with pytest.raises(ScorerError, match="HF models"):
        load_scorer(phasekv_dir, press="knorm")


@pytest.mark.skipif(HAS_KVPRESS, reason="checks the message shown where kvpress is missing")
def test_kvpress_spec_without_kvpress_says_how_to_get_it(qwen_dir):
    with pytest.raises(ScorerError, match="kvpress_venv.sh"):
        load_scorer(qwen_dir, press="knorm")


def test_question_is_the_query_tail_after_the_records():
    tok = word_tokenizer()
    assert question_tokens(tok, LOOKUP) == 3 * 2 + 2  # two demonstrations `; a n`, then `; a_k`
    assert question_tokens(tok, NeedleOptions(key_tokens=3)) == 1 + 3  # `; q_1 q_2 q_3`
    scorer = bind_question(HFScorer(tiny_qwen3(len(word_tokenizer())), word_tokenizer()), 5)
    assert not hasattr(scorer, "question_tokens")  # a scorer without a press is left alone


# --- kvpress presses ----------------------------------------------------------------------------------


def _press_scorer(text: str, question: int = 3, model=None, **options):
    from phasekv.scoring.press import KVPressScorer

    tok = word_tokenizer()
    model = randomize(tiny_qwen3(len(tok))) if model is None else model
    return KVPressScorer(model, tok, spec=parse_press(text), spec_text=text, question_tokens=question, **options)


def _kept_positions(full_keys: torch.Tensor, kept_keys: torch.Tensor) -> list[set[int]]:
    """Per KV head, the context positions whose keys the compressed cache holds (found by value)."""
    heads = []
    for h in range(full_keys.shape[1]):
        same = (kept_keys[0, h, :, None] == full_keys[0, h, None]).all(-1)  # [kept, C]
        assert torch.all(same.sum(1) == 1), "a kept entry is not exactly one of the context's entries"
        heads.append({int(i) for i in same.int().argmax(dim=1)})
        assert len(heads[-1]) == kept_keys.shape[2], "an entry is kept twice"
    return heads


@pytest.mark.parametrize("ratio", [0.25, 0.5, 0.75])
@pytest.mark.parametrize("press", ["KnormPress", "SnapKVPress"])
@needs_kvpress
def test_a_press_removes_the_intended_fraction_per_layer_and_head(press, ratio):
    extra = ", window_size=4" if press == "SnapKVPress" else ""
    scorer = _press_scorer(f"{press}(compression_ratio={ratio}{extra})")
    context = torch.randint(5, len(scorer.tokenizer), (1, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = scorer.model.model(input_ids=context, use_cache=True).past_key_values
        cache = scorer.compressed_cache(context)
    differing_heads = 0
    for full_layer, layer in zip(full.layers, cache.layers, strict=True):
        heads = _kept_positions(full_layer.keys, layer.keys)
        assert all(len(kept) == int(40 * (1 - ratio)) for kept in heads)
        differing_heads += len({frozenset(kept) for kept in heads}) > 1
    assert differing_heads > 0  # the selection is per head, not one set for the whole layer


@pytest.mark.parametrize("chunk", [4, 8])
@needs_kvpress
def test_chunkkv_keeps_whole_chunks_of_its_grid(chunk):
    scorer = _press_scorer(f"ChunkKVPress(press=KnormPress(compression_ratio=0.5), chunk_length={chunk})")
    assert scorer.compression_stride == chunk
    context = torch.randint(5, len(scorer.tokenizer), (1, 48), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = scorer.model.model(input_ids=context, use_cache=True).past_key_values
        cache = scorer.compressed_cache(context)
    for full_layer, layer in zip(full.layers, cache.layers, strict=True):
        for kept in _kept_positions(full_layer.keys, layer.keys):
            assert len(kept) == 48 // 2
            assert all({c * chunk + i for i in range(chunk)} <= kept for c in {p // chunk for p in kept})


def test_a_spec_compresses_rows_apart_only_when_every_nested_press_does():
    assert compresses_rows_apart(parse_press("snapkv")) and compresses_rows_apart(parse_press("block8-knorm"))
    assert not compresses_rows_apart(parse_press("chunkkv8"))  # the batch's first row picks everyone's chunks
    assert not compresses_rows_apart(parse_press("BlockPress(press=RandomPress(compression_ratio=0.5), block_size=8)"))
    assert not compresses_rows_apart(parse_press("ChunkPress(press=ChunkKVPress(press=KnormPress(), chunk_length=4))"))


BATCHED = [
    ("KnormPress(compression_ratio=0.5)", 0),
    ("SnapKVPress(compression_ratio=0.5, window_size=4)", 0),
    ("StreamingLLMPress(compression_ratio=0.5, n_sink=4)", 0),
    ("ChunkPress(press=SnapKVPress(compression_ratio=0.5, window_size=4), chunk_length=8)", 0),
    ("ChunkPress(press=KnormPress(compression_ratio=0.25), chunk_length=4)", 3),
    ("BlockPress(press=KnormPress(compression_ratio=0.5), block_size=8)", 0),
    ("BlockPress(press=SnapKVPress(compression_ratio=0.5, window_size=4), block_size=8)", 5),
    ("ChunkKVPress(press=SnapKVPress(compression_ratio=0.5, window_size=4), chunk_length=8)", 0),  # one at a time
    ("ChunkKVPress(press=KnormPress(compression_ratio=0.5), chunk_length=4)", 1),  # one at a time
]


@needs_kvpress
@pytest.mark.parametrize(("text", "offset"), BATCHED)
def test_a_batch_of_equal_lengths_scores_like_one_row_at_a_time(text, offset, monkeypatch):
    """Rows of the same lengths are prefilled together only under presses that compress each row on its own, and
    then give what one row at a time gives (float32 rounding apart), with the same kept entries counted."""
    from contextlib import nullcontext

    from phasekv.scoring.press import KVPressScorer

    tok = word_tokenizer()
    model = randomize(tiny_qwen3(len(tok)))
    draw = torch.Generator().manual_seed(1)
    sequences = [*torch.randint(5, len(tok), (5, 44), generator=draw).tolist()]
    sequences += torch.randint(5, len(tok), (3, 37), generator=draw).tolist()  # a second length: a second group
    prefill_rows = []
    compressed_cache = KVPressScorer.compressed_cache

    def counting(self, context_ids):
        prefill_rows.append(context_ids.shape[0])
        return compressed_cache(self, context_ids)

    monkeypatch.setattr(KVPressScorer, "compressed_cache", counting)
    scored = {}
    for batch_size in (1, 8):
        scorer = _press_scorer(text, question=5, model=model, batch_size=batch_size, workers=1)
        with scorer.grid_offset(offset) if offset else nullcontext():
            scored[batch_size] = (scorer.logprobs(sequences, 3), scorer.counter.record())
    one, batched = scored[1][0], scored[8][0]
    torch.testing.assert_close(batched, one, rtol=0, atol=1e-5)
    assert torch.equal(batched.argmax(-1), one.argmax(-1))
    assert scored[8][1] == scored[1][1]  # the same entries kept, row for row
    assert scored[8][1]["prefills"] == len(sequences)
    together = scorer.batches_rows
    assert together == (not text.startswith("ChunkKVPress"))
    assert prefill_rows[len(sequences) :] == ([3, 5] if together else [1] * len(sequences))  # shortest first
    assert ("prefilled together" in scorer.describe()["press"]["semantics"]) == together


@needs_kvpress
@pytest.mark.parametrize(
    ("text", "tied"),
    [
        ("SnapKVPress(compression_ratio=0.5)", 1.0),  # its 64-token window holds more than the 50 entries it keeps
        ("SnapKVPress(compression_ratio=0.5, window_size=4)", 0.0),
        ("KnormPress(compression_ratio=0.5)", 0.0),
        ("StreamingLLMPress(compression_ratio=0.5, n_sink=4)", 0.0),  # exactly n_kept entries score 1
        ("ChunkKVPress(press=KnormPress(compression_ratio=0.5), chunk_length=8)", None),  # cuts chunks: not checked
    ],
)
def test_the_scorer_counts_selections_cut_inside_a_tie(text, tied):
    """A selection whose n_kept-th best score equals the next is decided by top-k's tie order: SnapKV with a window
    longer than what it keeps always is (and keeps the same recent tokens in every head), the others are not."""
    scorer = _press_scorer(text, question=5)
    draw = torch.Generator().manual_seed(0)  # no token twice: KNorm ties a token with its repeat (RoPE keeps norms)
    sequences = [(5 + torch.randperm(len(scorer.tokenizer) - 5, generator=draw)[:107]).tolist() for _ in range(3)]
    scorer.logprobs(sequences, 2)  # contexts of 107 - 1 - 5 = 101 tokens, as in the presses profile: 50 kept
    record = scorer.describe()["press"]["ties_at_cut"]
    if tied is None:
        assert record == {"checked": False}
        return
    layers = len(scorer.model.model.layers)
    assert record["selections"] == 3 * layers * scorer.model.config.num_key_value_heads
    assert record["fraction"] == tied
    if tied:
        context = torch.tensor(sequences[:1])[:, :101]
        with torch.no_grad():
            full = scorer.model.model(input_ids=context, use_cache=True).past_key_values
            cache = scorer.compressed_cache(context)
        layers = zip(full.layers, cache.layers, strict=True)
        kept = {frozenset(heads) for f, c in layers for heads in _kept_positions(f.keys, c.keys)}
        assert all(min(heads) >= 101 - 64 for heads in kept) and len(kept) == 1  # one recent subset everywhere


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_decoding_against_layers_of_different_lengths_equals_decoding_token_by_token(attention):
    """ChunkKV keeps a different number of entries per layer: one forward with a mask per layer must give what
    running the question one token at a time gives (the reference runs on SDPA, whose mask HF cuts to each
    layer's length: with eager attention HF's one mask does not fit the shorter layers at all)."""
    import copy

    from phasekv.scoring.press import decode_against, decode_token_by_token

    tok = word_tokenizer()
    model = randomize(tiny_qwen3(len(tok)))
    model.set_attn_implementation(attention)
    ids = torch.randint(5, len(tok), (1, 30), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        cache = model.model(input_ids=ids[:, :24], use_cache=True).past_key_values
        for i, layer in enumerate(cache.layers):  # as if a press had kept 24 - 2 i entries in layer i
            keep = torch.arange(24)[2 * i :]
            layer.keys, layer.values = layer.keys[:, :, keep], layer.values[:, :, keep]
        assert len({layer.keys.shape[2] for layer in cache.layers}) > 1
        batched = decode_against(model, ids[:, 24:], copy.deepcopy(cache), 24)
        model.set_attn_implementation("sdpa")
        reference = decode_token_by_token(model, ids[:, 24:], copy.deepcopy(cache), 24)
        model.set_attn_implementation(attention)
        equal_lengths = model.model(input_ids=ids[:, :24], use_cache=True).past_key_values
        plain = model(input_ids=ids).logits[:, 24:]
        unchanged = decode_against(model, ids[:, 24:], equal_lengths, 24)
    torch.testing.assert_close(batched, reference, rtol=0, atol=1e-5)
    torch.testing.assert_close(unchanged, plain, rtol=0, atol=1e-5)
    assert (batched - plain).abs().max() > 1e-3  # the pruned layers did change the result


@needs_kvpress
def test_a_press_that_keeps_everything_scores_like_no_press():
    """Prefill, then decode the question against the (uncompressed) cache = one plain forward: bit for bit with
    eager attention; with SDPA its kernels differ by shape, so to float32 rounding with the same top-1."""
    tok = word_tokenizer()
    model = randomize(tiny_qwen3(len(tok)))
    sequences = torch.randint(5, len(tok), (3, 30), generator=torch.Generator().manual_seed(0)).tolist()
    sdpa_plain = HFScorer(model, tok).logprobs(sequences, 2)
    sdpa_press = _press_scorer("StreamingLLMPress(compression_ratio=0.0)", model=model).logprobs(sequences, 2)
    torch.testing.assert_close(sdpa_press, sdpa_plain, rtol=0, atol=1e-5)
    assert torch.equal(sdpa_press.argmax(-1), sdpa_plain.argmax(-1))
    model.set_attn_implementation("eager")
    eager_plain = HFScorer(model, tok).logprobs(sequences, 2)
    press = _press_scorer("KnormPress(compression_ratio=0.0)", model=model)
    assert torch.equal(press.logprobs(sequences, 2), eager_plain)
    assert press.counter.record()["kept_fraction"] == 1.0


@needs_kvpress
def test_compressed_context_changes_the_answer_but_not_the_question():
    """Compressing the context changes the log-probs; a sequence with no context left is refused."""
    tok = word_tokenizer()
    model = randomize(tiny_qwen3(len(tok)))
    sequences = torch.randint(5, len(tok), (2, 30), generator=torch.Generator().manual_seed(0)).tolist()
    plain = HFScorer(model, tok).logprobs(sequences, 1)
    compressed = _press_scorer("KnormPress(compression_ratio=0.5)", model=model, question=2).logprobs(sequences, 1)
    assert (compressed - plain).abs().max() > 1e-3
    with pytest.raises(ScorerError, match="no context"):
        _press_scorer("KnormPress(compression_ratio=0.5)", model=model, question=30).logprobs(sequences, 1)


@needs_kvpress
def test_lookup_with_a_chunk_press_records_press_stride_and_kept_entries(qwen_dir):
    text = "ChunkKVPress(press=KnormPress(compression_ratio=0.5), chunk_length=4)"
    scorer = load_scorer(qwen_dir, press=text, batch_size=64)
    bind_question(scorer, question_tokens(scorer.tokenizer, LOOKUP))
    result = run_lookup(scorer, LOOKUP, n_resamples=50, progress=False)
    assert result["stride"]["value"] == 4
    press = result["model"]["press"]
    assert press["class"] == "ChunkKVPress" and press["stride"] == {"value": 4, "source": "ChunkKVPress.chunk_length"}
    assert press["question_tokens"] == 8
    entries = press["kv_entries"]
    assert 1 <= entries["prefills"] <= result["n_prompts"]  # identical prompts are scored once
    assert 0.4 < entries["kept_fraction"] <= 0.55


# --- the presses profile ----------------------------------------------------------------------------------


def _tiny_profile(*methods):
    from phasekv.studies.presses.options import PressMethod, PressProfile

    return PressProfile(
        name="presses-test",
        description="tiny",
        methods=(PressMethod("full", "Full cache"), *(PressMethod(name, name, spec) for name, spec in methods)),
        probes={"lookup": LOOKUP},
        resamples=50,
        batch_size=64,
        threads=1,
        jobs=2,
    )


def test_presses_profile_runs_cells_reuses_them_and_writes_table_and_figure(qwen_dir, tmp_path):
    import json
    import shutil

    from phasekv.reproduce.cache import stored_result
    from phasekv.reproduce.presses import cell_key, run_presses
    from phasekv.studies.presses.run import cell_config, cell_path

    profile = _tiny_profile(("pool", "pool:w=4,s=2,local=3"))
    lines = []
    results = run_presses(profile, tmp_path, qwen_dir, echo=lines.append)
    assert sorted(line.split(":")[0] for line in lines) == ["lookup full", "lookup pool"]
    rows = json.loads((tmp_path / "presses.json").read_text())["rows"]
    assert [(r["method"], r["stride"], r["press"]) for r in rows] == [
        ("full", 4, None),  # no press: the probe's default modulus // 2
        ("pool", 2, "pool:w=4,s=2,local=3"),
    ]
    assert rows[0]["kept_fraction"] == 1.0
    # the method with a grid also takes the grid-shift test, the full cache cannot
    assert "grid shift" in rows[1]["phase_verdict"] and "grid shift" not in rows[0]["phase_verdict"]
    assert results["lookup"]["pool"]["phase_test"]["grid_shift"]["offsets"] == [0, 1]
    length = results["lookup"]["pool"]["controls"]["query_positions"][0] + 1
    assert rows[1]["kept_fraction"] == pytest.approx(((length - 4) // 2 + 1 + 3) / length)
    assert "| Full cache | lookup |" in (tmp_path / "table.md").read_text()
    assert (tmp_path / "residues.png").stat().st_size > 1000
    lines.clear()
    run_presses(profile, tmp_path, qwen_dir, echo=lines.append)
    assert all("reused" in line for line in lines)
    config = cell_config(profile, profile.methods[1], "lookup", qwen_dir)
    path = cell_path(tmp_path, profile.methods[1], "lookup")
    assert stored_result(path, cell_key(config, qwen_dir)) is not None
    assert stored_result(path, cell_key({**config, "resamples": 51}, qwen_dir)) is None
    # keyed on the model's contents, not its path: a copy is the same model, other weights are not
    copy = tmp_path / "copy"
    shutil.copytree(qwen_dir, copy)
    assert stored_result(path, cell_key(cell_config(profile, profile.methods[1], "lookup", copy), copy)) is not None
    (copy / "model.safetensors").write_bytes(b"other weights")
    assert stored_result(path, cell_key(config, copy)) is None


def test_presses_plan_writes_the_cell_configs_and_their_commands_and_computes_nothing(qwen_dir, tmp_path, monkeypatch):
    import json

    from typer.testing import CliRunner

    import phasekv.reproduce.presses as presses
    from phasekv.cli import app
    from phasekv.studies.presses import options

    def no_cell(*_):
        raise AssertionError("a plan computes no cell")

    monkeypatch.setattr(presses, "run_cell", no_cell)
    monkeypatch.setitem(options.PRESS_PROFILES, "presses-test", _tiny_profile(("pool", "pool:w=4,s=2,local=3")))
    out = tmp_path / "out"
    res = CliRunner().invoke(
        app, ["reproduce", "--profile", "presses-test", "--model", str(qwen_dir), "--out", str(out), "--plan"]
    )
    assert res.exit_code == 0, res.output
    commands = [line for line in res.output.splitlines() if "-m phasekv.studies.presses.cell" in line]
    assert len(commands) == 2 and not (out / "cells").exists() and not (out / "table.md").exists()
    for name in ("full", "pool"):
        config = json.loads((out / "configs" / f"{name}-lookup.json").read_text())
        assert config["method"] == name and config["model"] == str(qwen_dir.resolve())
        assert any(line.endswith(f"configs/{name}-lookup.json {out}/cells/{name}-lookup.json") for line in commands)


def test_press_table_shows_the_robust_phase_test_when_present():
    from phasekv.studies.presses.table import markdown_press_table

    row = dict(label="m", probe="lookup", mean=50.0, worst=40.0, gap=20.0, gap_ci=[5.0, 30.0], stride=8)
    row |= dict(period_diff=3.0, period_diff_ci=None, phase_p=None, phase_verdict=None, learned=True)
    row |= dict(kept_fraction=0.5, wall_time_s=3.0)
    assert "| - | - |" in markdown_press_table([row])
    row |= dict(phase_p=0.004, phase_verdict="phase-sensitive")
    assert "| 0.004 | phase-sensitive | 0.50 | 3 |" in markdown_press_table([row])
    row |= dict(ties_at_cut=1.0)
    assert "| 0.50 (cut in a tie: 100%) | 3 |" in markdown_press_table([row])


def test_a_press_at_the_floor_is_not_judged_in_the_summary_and_the_press_table(qwen_dir, tmp_path):
    """The untrained model under pooling answers 0%: the CLI says "not judged: at chance", and so does the press
    table, also for a cell written before the chance rule (its phase test recorded no chance level)."""
    import json

    from typer.testing import CliRunner

    from phasekv.cli.evaluate import eval_app
    from phasekv.stats.verdict import NO_EFFECT
    from phasekv.studies.presses.options import PressMethod
    from phasekv.studies.presses.table import markdown_press_table, press_row
    from phasekv.studies.probe.result import ProbeResult

    out = tmp_path / "pool.json"
    args = ["lookup", str(qwen_dir), "--records", "12", "--demos", "2", "--mappings", "2", "--modulus", "8"]
    args += ["--seed", "3", "--press", "pool:w=4,s=2,local=3", "--resamples", "50", "--quiet", "--out", str(out)]
    result = CliRunner().invoke(eval_app, args)
    assert result.exit_code == 0, result.output
    assert "mean 0.0%" in result.output and "phase verdict at period 2: NOT JUDGED: AT CHANCE" in result.output
    assert "NO PHASE EFFECT" not in result.output
    saved = json.loads(out.read_text())
    before_the_rule = {key: value for key, value in saved["phase_test"].items() if key != "chance"}
    old = {**saved, "phase_test": {**before_the_rule, "verdict": NO_EFFECT}}
    method = PressMethod("pool", "pool", "pool:w=4,s=2,local=3")
    for cell in (saved, old):
        row = press_row(method, "lookup", ProbeResult.from_dict(cell), out)
        assert row["phase_verdict"].startswith("not judged: at chance (")
        assert "no phase effect" not in markdown_press_table([row])
    # a learned model's verdict from such a file is left as it was given
    learned = {**old, "summary": {**old["summary"], "stat_intervals": {**old["summary"]["stat_intervals"]}}}
    learned["summary"]["stat_intervals"]["mean"] = [0.5, 0.9]
    assert ProbeResult.from_dict(learned).verdict == NO_EFFECT


def test_pool_cache_entries_count_the_complete_windows():
    from phasekv.compress.windows import WindowGeometry

    for window, stride, length in [(8, 8, 64), (8, 4, 63), (3, 5, 2), (1, 1, 9)]:
        spec = PoolSpec(window, stride, 4)
        assert spec.cache_entries(length) == WindowGeometry(window, stride).num_complete(length) + min(4, length)


@needs_kvpress
def test_presses_profile_runs_kvpress_cells(qwen_dir, tmp_path):
    import json

    from phasekv.reproduce.presses import run_presses

    spec = "ChunkKVPress(press=KnormPress(compression_ratio=0.5), chunk_length=4)"
    run_presses(_tiny_profile(("chunk", spec)), tmp_path, qwen_dir, echo=lambda _: None)
    chunk = json.loads((tmp_path / "presses.json").read_text())["rows"][1]
    assert chunk["stride"] == 4 and 0.4 < chunk["kept_fraction"] <= 0.55


def test_cli_eval_with_press_writes_the_press_and_refuses_an_endpoint(qwen_dir, tmp_path):
    import json

    from typer.testing import CliRunner

    from phasekv.cli.evaluate import eval_app

    runner = CliRunner()
    args = ["needle", str(qwen_dir), "--context-length", "64", "--records", "4", "--haystacks", "2", "--modulus", "4"]
    out = tmp_path / "needle.json"
    result = runner.invoke(eval_app, [*args, "--press", "pool:w=2,s=2,local=4", "--quiet", "--out", str(out)])
    assert result.exit_code == 0, result.output
    saved = json.loads(out.read_text())
    assert saved["stride"] == {"value": 2, "source": "model config (compression stride)"}
    assert saved["model"]["press"]["spec"] == "pool:w=2,s=2,local=4"
    result = runner.invoke(eval_app, [*args, "--press", "knorm", "--endpoint", "http://127.0.0.1:9"])
    assert result.exit_code == 2 and "--endpoint" in result.output
    result = runner.invoke(eval_app, [*args, "--press", "KnormPress(0.5)"])
    assert result.exit_code == 2 and "keyword arguments" in result.output


@needs_kvpress
def test_cli_eval_says_when_a_press_cuts_inside_ties(qwen_dir):
    """SnapKV with its default 64-token window on contexts of about 120 tokens keeps only window tokens, which all
    score the same: the summary says that the tie order chose; with an 8-token window it does not."""
    from typer.testing import CliRunner

    from phasekv.cli.evaluate import eval_app

    args = ["needle", str(qwen_dir), "--context-length", "128", "--records", "4", "--haystacks", "2", "--modulus", "4"]
    tied = CliRunner().invoke(eval_app, [*args, "--press", "snapkv", "--quiet"])
    assert tied.exit_code == 0, tied.output
    assert "100% of its selections cut inside a run of equal scores (there top-k's tie order" in tied.output
    press = "SnapKVPress(compression_ratio=0.5, window_size=8)"
    untied = CliRunner().invoke(eval_app, [*args, "--press", press, "--quiet"])
    assert "press: 0.50 of the context's KV entries kept" in untied.output and "tie order" not in untied.output


# --- moving a press's chunk grid (the grid-shift test) ------------------------------------------------


def test_grid_segments_cut_at_the_offset_then_every_size():
    from phasekv.scoring.press_grid import grid_segments

    assert grid_segments(0, 20, 8, 0) == [(0, 8), (8, 16), (16, 20)]
    assert grid_segments(0, 20, 8, 3) == [(0, 3), (3, 11), (11, 19), (19, 20)]
    assert grid_segments(5, 21, 8, 0) == [(5, 13), (13, 21)]
    assert grid_segments(5, 21, 8, 7) == [(5, 12), (12, 20), (20, 21)]
    assert grid_segments(0, 5, 8, 2) == [(0, 2), (2, 5)]
    for start, end, size, offset in [(0, 37, 8, 5), (3, 40, 4, 1), (0, 7, 8, 0)]:
        segments = grid_segments(start, end, size, offset)
        assert segments[0][0] == start and segments[-1][1] == end
        assert all(a < b == c for (a, b), (c, _) in zip(segments, segments[1:], strict=False))
        assert all((a - start - offset) % size == 0 for a, _ in segments[1:])
    with pytest.raises(ValueError, match="offset"):
        grid_segments(0, 10, 4, 4)


GRID_PRESSES = [
    "ChunkKVPress(press=KnormPress(compression_ratio=0.5), chunk_length=8)",
    "ChunkPress(press=KnormPress(compression_ratio=0.4), chunk_length=8)",
    "BlockPress(press=KnormPress(compression_ratio=0.5), block_size=8)",
]


class _Module:
    head_dim = 4


@needs_kvpress
@pytest.mark.parametrize("text", GRID_PRESSES)
@pytest.mark.parametrize("length", [40, 37, 11, 5])
def test_a_shifted_press_at_offset_zero_is_kvpress(text, length):
    from phasekv.scoring.press import build_press
    from phasekv.scoring.press_grid import shifted_press_class

    spec = parse_press(text)
    original = build_press(spec)
    ours = shifted_press_class(spec.name)(**{**vars(original), "grid_offset": 0})
    hidden, keys, values = press_inputs(length, seed=length)
    expected = original.compress(_Module(), hidden, keys, values, None, {})
    got = ours.compress(_Module(), hidden, keys, values, None, {})
    torch.testing.assert_close(got[0], expected[0], rtol=0, atol=0)
    torch.testing.assert_close(got[1], expected[1], rtol=0, atol=0)


@needs_kvpress
@pytest.mark.parametrize("offset", [1, 3, 7])
def test_a_shifted_chunkkv_keeps_whole_chunks_of_the_moved_grid(offset):
    from phasekv.scoring.press import build_press
    from phasekv.scoring.press_grid import grid_segments

    spec = parse_press(GRID_PRESSES[0])
    press = build_press(spec, grid_offset=offset)
    assert press.grid_offset == offset and press.chunk_length == 8
    hidden, keys, values = press_inputs(37, seed=offset)
    kept_keys, _ = press.compress(_Module(), hidden, keys, values, None, {})
    # which positions survived: match the kept key vectors back to the input
    kept = {int((keys[0, 0] == row).all(-1).nonzero()[0]) for row in kept_keys[0, 0]}
    segments = grid_segments(0, 37, 8, offset)
    for a, b in segments:
        inside = kept & set(range(a, b))
        assert inside in (set(), set(range(a, b)))  # a chunk is kept whole or dropped
    assert len([s for s in segments if set(range(*s)) <= kept]) == max(1, int(len(segments) * 0.5))


@needs_kvpress
def test_kvpress_scorer_moves_its_grid_for_the_block_only(qwen_dir):
    scorer = load_scorer(qwen_dir, press=GRID_PRESSES[0])
    scorer.question_tokens = 3
    ids = torch.randint(0, 40, (1, 30), generator=torch.Generator().manual_seed(5))
    positions = torch.tensor([[27, 28, 29]])
    with torch.no_grad():
        base = scorer._logits(ids, positions)
        with scorer.grid_offset(3):
            assert scorer.press.grid_offset == 3
            shifted = scorer._logits(ids, positions)
        again = scorer._logits(ids, positions)
        with scorer.grid_offset(scorer.unshifted_grid_offset):  # the grid-shift test reuses this grid's scores
            in_place = scorer._logits(ids, positions)
    torch.testing.assert_close(again, base, rtol=0, atol=0)
    torch.testing.assert_close(in_place, base, rtol=0, atol=0)
    assert (shifted - base).abs().max() > 1e-5
    with pytest.raises(ValueError, match="chunk grid"), scorer.grid_offset(8):
        pass


def test_a_pool_press_takes_the_grid_shift_test(qwen_dir):
    scorer = load_scorer(qwen_dir, press="pool:w=4,s=4,local=3", batch_size=64)
    result = run_lookup(scorer, LOOKUP, n_resamples=50, progress=False, grid_shift=True)
    shifted = result["phase_test"]["grid_shift"]
    assert shifted["offsets"] == [0, 1, 2, 3]
    assert "grid shift" in result["phase_test"]["basis"]


def test_grid_shift_is_refused_before_scoring_for_a_press_without_a_grid(qwen_dir):
    scorer = load_scorer(qwen_dir, batch_size=64)
    with pytest.raises(ValueError, match="chunk grid"):
        run_lookup(scorer, LOOKUP, n_resamples=50, progress=False, grid_shift=True)


def test_a_plan_of_some_methods_on_a_device_writes_only_their_configs_with_the_device(qwen_dir, tmp_path, monkeypatch):
    import json

    from typer.testing import CliRunner

    from phasekv.cli import app
    from phasekv.studies.presses import options

    profile = _tiny_profile(("pool", "pool:w=4,s=2,local=3"), ("pool2", "pool:w=2,s=2,local=3"))
    monkeypatch.setitem(options.PRESS_PROFILES, "presses-test", profile)
    out = tmp_path / "out"
    base = ["reproduce", "--profile", "presses-test", "--model", str(qwen_dir), "--out", str(out), "--plan"]
    res = CliRunner().invoke(app, [*base, "--methods", "pool2,pool", "--device", "cuda", "--batch-size", "7"])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (out / "configs").iterdir()) == ["pool-lookup.json", "pool2-lookup.json"]
    config = json.loads((out / "configs" / "pool2-lookup.json").read_text())
    assert (config["device"], config["batch_size"]) == ("cuda", 7)
    # the command it names computes these very cells (the profile's order, not the order given)
    assert "--methods pool,pool2 --device cuda --batch-size 7 --out" in res.output.splitlines()[-1]
    res = CliRunner().invoke(app, [*base, "--methods", "pool,bogus"])
    assert res.exit_code != 0 and "unknown method(s) bogus" in res.output and "full, pool, pool2" in res.output
    res = CliRunner().invoke(app, ["reproduce", "--profile", "quick", "--device", "cuda", "--plan", "--out", str(out)])
    assert res.exit_code != 0 and "presses profiles only" in res.output


def test_a_cell_loads_its_model_on_the_device_of_its_config(monkeypatch):
    from phasekv.studies.presses import cell

    seen = {}

    class Stop(Exception):
        pass

    def load(path, **options):
        seen.update(options)
        raise Stop

    monkeypatch.setattr(cell, "load_scorer", load)
    config = {"probe": "lookup", "options": {}, "model": "m", "press": None, "batch_size": 3, "threads": 1}
    for given, device in (({"device": "cuda"}, "cuda"), ({}, "cpu")):  # configs written before devices ran on cpu
        with pytest.raises(Stop):
            cell.run({**config, **given})
        assert seen["device"] == device and seen["batch_size"] == 3


def test_a_cell_scored_under_other_statistics_is_judged_again_not_scored_again(qwen_dir, tmp_path, monkeypatch):
    """Its outcomes are the model's: when only the statistics' hash differs, the profile re-judges the stored cell
    from its records (a verdict written by the older rule is replaced), and a plan counts it as stored."""
    import json

    import phasekv.reproduce.cache as cache
    import phasekv.reproduce.presses as presses
    from phasekv.studies.presses.run import cell_path

    profile = _tiny_profile(("pool", "pool:w=4,s=2,local=3"))
    presses.run_presses(profile, tmp_path, qwen_dir, echo=lambda _: None)
    path = cell_path(tmp_path, profile.methods[1], "lookup")
    fresh = json.loads(path.read_text())
    stale = {**fresh, "phase_test": {**fresh["phase_test"], "verdict": "phase-sensitive"}}
    stale["reproduce"] = {**fresh["reproduce"], "analysis": "the hash of older statistics"}
    path.write_text(json.dumps(stale))
    assert "(to be judged again)" in presses.plan_presses(profile, tmp_path, qwen_dir)
    assert (
        json.loads(path.read_text())["reproduce"]["analysis"] == "the hash of older statistics"
    )  # a plan writes nothing

    def no_cell(*_):
        raise AssertionError("a re-judged cell is not scored again")

    monkeypatch.setattr(presses, "run_cell", no_cell)
    lines = []
    presses.run_presses(profile, tmp_path, qwen_dir, echo=lines.append)
    assert "lookup pool: judged again from its records (the statistics changed)" in lines
    again = json.loads(path.read_text())
    assert again["reproduce"] == fresh["reproduce"] and again["phase_test"] == fresh["phase_test"]
    # another model's (or another version's) cell is not re-judged: it is scored again
    other = {**fresh, "reproduce": {**fresh["reproduce"], "analysis": "x", "checkpoint": {"model.safetensors": "y"}}}
    path.write_text(json.dumps(other))
    assert cache.scored_under(path, fresh["reproduce"]) is None
    with pytest.raises(AssertionError, match="not scored again"):
        presses.run_presses(profile, tmp_path, qwen_dir, echo=lines.append)
