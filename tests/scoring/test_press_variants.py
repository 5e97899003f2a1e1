"""ChunkKV with its chunk grid staggered across layers or dithered per prompt (`scoring.press_staggered`,
`scoring.press_dithered`): the same kept-token budget as ChunkKV, ChunkKV itself at offset 0, kept positions that
follow the definition (a plain reference loop), a dithered offset that is a function of the prompt, and the
grid-shift test taken by the staggered press and refused for the dithered one. Tests marked `kvpress` run in the
kvpress environment (`scripts/test_kvpress.sh`) and skip elsewhere."""

import pytest
import torch

from conftest import needs_kvpress, press_inputs, randomize, word_tokenizer
from phasekv.scoring.press_dithered import dither_offset
from phasekv.scoring.press_spec import PRESETS, grid_shift_refusal, parse_press, press_stride
from phasekv.scoring.press_staggered import layer_offset

CHUNKKV = "ChunkKVPress(press={inner}, chunk_length=8)"
STAGGERED = "StaggeredChunkKVPress(press={inner}, chunk_length=8, stagger={stagger})"
DITHERED = "DitheredChunkKVPress(press={inner}, chunk_length=8, seed={seed})"
KNORM = "KnormPress(compression_ratio=0.5)"
INNER = [KNORM, "SnapKVPress(compression_ratio=0.5, window_size=4)", "SnapKVPress(compression_ratio=0.5)"]


# --- without kvpress -----------------------------------------------------------------------------------------


def test_the_presets_parse_with_chunkkv8s_grid_and_only_the_dithered_one_refuses_the_grid_shift():
    staggered, dithered = parse_press("chunkkv8-staggered"), parse_press("chunkkv8-dithered")
    chunkkv = parse_press("chunkkv8")
    assert staggered.name == "StaggeredChunkKVPress" and dithered.name == "DitheredChunkKVPress"
    for variant in (staggered, dithered):
        assert variant.kwargs["press"] == chunkkv.kwargs["press"]  # SnapKV 0.5: the same budget rule as chunkkv8
        assert variant.kwargs["chunk_length"] == chunkkv.kwargs["chunk_length"] == 8
        assert press_stride(variant) == (8, f"{variant.name}.chunk_length")
    assert staggered.kwargs["stagger"] == 1 and dithered.kwargs["seed"] == 0  # the seed is in the spec text
    assert parse_press(PRESETS["chunkkv8-dithered"]) == dithered
    assert grid_shift_refusal(staggered) is None and grid_shift_refusal(chunkkv) is None
    refusal = grid_shift_refusal(dithered)
    assert "--grid-shift" in refusal and "per prompt" in refusal and "\n" not in refusal


def test_the_staggered_layers_start_their_grids_at_stagger_times_the_layer_plus_the_shift_mod_the_chunk():
    assert [layer_offset(layer, 8) for layer in range(30)] == [layer % 8 for layer in range(30)]
    assert [layer_offset(layer, 8, grid_offset=3) for layer in range(10)] == [3, 4, 5, 6, 7, 0, 1, 2, 3, 4]
    assert {layer_offset(layer, 8, stagger=0) for layer in range(30)} == {0}
    assert [layer_offset(layer, 8, stagger=3) for layer in range(4)] == [0, 3, 6, 1]


def test_the_dithered_offset_is_a_function_of_the_prompt_and_the_seed():
    draw = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, 50000, (101,), generator=draw).tolist() for _ in range(64)]
    offsets = [dither_offset(p, seed=0, chunk_length=8) for p in prompts]
    assert offsets == [dither_offset(list(p), seed=0, chunk_length=8) for p in prompts]  # same prompt, same offset
    assert offsets == [dither_offset(torch.tensor(p), seed=0, chunk_length=8) for p in prompts]  # any container
    assert set(offsets) == set(range(8))  # prompts differ: all 8 offsets among 64 prompts
    assert max(offsets.count(o) for o in range(8)) <= 16  # near uniform (8 expected each)
    one_token_apart = [dither_offset([*prompts[0][:-1], t], seed=0, chunk_length=8) for t in range(16)]
    assert len(set(one_token_apart)) > 1  # the last token alone moves it
    reseeded = [dither_offset(p, seed=1, chunk_length=8) for p in prompts]
    assert reseeded != offsets  # the seed is part of the draw
    assert dither_offset([1, 2, 3], seed=0, chunk_length=8) == dither_offset([1, 2, 3], seed=0, chunk_length=8)
    assert all(0 <= dither_offset(p, seed=5, chunk_length=4) < 4 for p in prompts)


def test_cli_refuses_the_grid_shift_for_the_dithered_press_in_one_line_before_loading_the_model(tmp_path):
    from typer.testing import CliRunner

    from phasekv.cli.evaluate import eval_app

    missing = tmp_path / "no-model-here"  # refused before the model is read
    args = ["lookup", str(missing), "--press", "chunkkv8-dithered", "--grid-shift", "--mappings", "2"]
    result = CliRunner().invoke(eval_app, args)
    assert result.exit_code != 0
    message = [line for line in result.output.splitlines() if line.strip()]
    assert len(message) == 1 and "no fixed grid to move" in message[0], result.output


# --- with kvpress: the presses on their own ---------------------------------------------------------------


class _Layer:
    """What a press reads of an attention layer."""

    head_dim = 4

    def __init__(self, layer_idx: int = 0):
        self.layer_idx = layer_idx


def _positions(keys: torch.Tensor, kept: torch.Tensor) -> list[int]:
    """The positions of `keys` [1, H, n, D] that `kept` [1, H, k, D] holds (head 0; matched by value), in order."""
    return [int((keys[0, 0] == row).all(-1).nonzero()[0]) for row in kept[0, 0]]


def reference_kept(scores: list[float], chunk: int, ratio: float, offset: int) -> set[int]:
    """The kept positions from the definition, given the head-summed scores. Budget: what kvpress's ChunkKV keeps
    (chunks cut at multiples of `chunk`, the last one partial, the best max(1, int(chunks x (1 - ratio))) by mean
    score). The moved grid (cuts at offset + k x chunk) ranks its segments by mean score (ties: the earlier one),
    keeps them whole while they fit, and fills the rest of the budget from the next one by score (ties: earlier)."""
    n = len(scores)

    def segments(o: int) -> list[tuple[int, int]]:
        cuts = [0, *(p for p in range(1, n) if (p - o) % chunk == 0), n]
        return list(zip(cuts, cuts[1:], strict=False))

    def mean(segment):
        a, b = segment
        return sum(scores[a:b]) / (b - a)

    chunks = segments(0)
    best = sorted(chunks, key=lambda s: -mean(s))[: max(1, int(len(chunks) * (1 - ratio)))]
    if offset == 0:
        return {p for a, b in best for p in range(a, b)}
    budget, kept = sum(b - a for a, b in best), set()
    for a, b in sorted(segments(offset), key=lambda s: -mean(s)):
        room = budget - len(kept)
        kept |= set(sorted(range(a, b), key=lambda p: -scores[p])[:room])
    assert len(kept) == budget
    return kept


def _knorm_scores(keys: torch.Tensor) -> list[float]:
    """KnormPress's score (minus the key norm), summed over heads, row 0."""
    return (-keys[0].norm(dim=-1)).sum(0).tolist()


@needs_kvpress
@pytest.mark.parametrize("length", [40, 37, 53, 101])
def test_the_staggered_press_keeps_each_layers_tokens_as_defined_and_chunkkvs_count(length):
    from phasekv.scoring.press import build_press

    chunkkv = build_press(parse_press(CHUNKKV.format(inner=KNORM)))
    for shift in (0, 3):
        press = build_press(parse_press(STAGGERED.format(inner=KNORM, stagger=1)), grid_offset=shift)
        for layer in range(10):
            hidden, keys, values = press_inputs(length, seed=100 * length + layer)
            kept, _ = press.compress(_Layer(layer), hidden, keys, values, None, {})
            expected, _ = chunkkv.compress(_Layer(layer), hidden, keys, values, None, {})
            assert kept.shape == expected.shape  # exactly ChunkKV's number of tokens
            positions = _positions(keys, kept)
            assert positions == sorted(positions)  # in context order
            offset = (layer + shift) % 8
            assert set(positions) == reference_kept(_knorm_scores(keys), 8, 0.5, offset), (layer, shift)


@needs_kvpress
@pytest.mark.parametrize("offset", range(8))
def test_the_dithered_press_keeps_the_tokens_its_offset_defines(offset):
    from phasekv.scoring.press import build_press

    press = build_press(parse_press(DITHERED.format(inner=KNORM, seed=0)))
    chunkkv = build_press(parse_press(CHUNKKV.format(inner=KNORM)))
    for length in (37, 101):
        hidden, keys, values = press_inputs(length, seed=length + offset)
        press.current_offset = offset  # what the input-embedding hook sets from the prompt's tokens
        kept, _ = press.compress(_Layer(), hidden, keys, values, None, {})
        assert kept.shape == chunkkv.compress(_Layer(), hidden, keys, values, None, {})[0].shape
        assert set(_positions(keys, kept)) == reference_kept(_knorm_scores(keys), 8, 0.5, offset)
    press.current_offset = None
    with pytest.raises(RuntimeError, match="token ids"):
        press.compress(_Layer(), hidden, keys, values, None, {})


def test_the_reference_cuts_the_moved_grid_where_the_definition_says():
    """The reference's own check, on scores chosen by hand: 20 tokens, chunk 8, ratio 0.5."""
    scores = [0.0] * 20
    for p in (3, 4, 5, 6, 7, 8, 9, 10):  # the moved grid's chunk [3, 11) at offset 3
        scores[p] = 1.0
    # kvpress: chunks [0,8) [8,16) [16,20), keep 1: [0,8) (mean 5/8) before [8,16) (3/8): 8 tokens
    assert reference_kept(scores, 8, 0.5, 0) == set(range(8))
    assert reference_kept(scores, 8, 0.5, 3) == set(range(3, 11))  # the moved chunk, whole: the same 8 tokens
    scores[19] = 5.0  # now the last partial chunk [16, 20) (mean 1.25) wins at offset 0: 4 tokens kept
    assert reference_kept(scores, 8, 0.5, 0) == set(range(16, 20))
    assert reference_kept(scores, 8, 0.5, 3) == {19, 3, 4, 5}  # [19, 20) (mean 5) whole, then 3 of [3, 11)


# --- with kvpress: in a model -------------------------------------------------------------------------------


def _model(layers: int = 10):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from conftest import QWEN3_TINY

    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=len(word_tokenizer()), **{**QWEN3_TINY, "num_hidden_layers": layers})
    return randomize(Qwen3ForCausalLM(config).eval())


def _scorer(text: str, model, **options):
    from phasekv.scoring.press import KVPressScorer

    return KVPressScorer(model, word_tokenizer(), spec=parse_press(text), spec_text=text, question_tokens=3, **options)


def _cache(scorer, context: torch.Tensor):
    with torch.no_grad():
        return scorer.compressed_cache(context)


@needs_kvpress
@pytest.mark.parametrize("inner", INNER)
def test_in_a_model_each_variant_keeps_chunkkvs_tokens_layer_by_layer_and_stagger_zero_is_chunkkv(inner):
    model = _model()
    chunkkv = _scorer(CHUNKKV.format(inner=inner), model)
    staggered = _scorer(STAGGERED.format(inner=inner, stagger=1), model)
    unstaggered = _scorer(STAGGERED.format(inner=inner, stagger=0), model)
    dithered = _scorer(DITHERED.format(inner=inner, seed=0), model)
    draw = torch.Generator().manual_seed(1)
    moved = 0
    for length in (101, 77, 130):  # SnapKV's default window needs more than 64 tokens
        context = torch.randint(5, len(word_tokenizer()), (1, length), generator=draw)
        expected = _cache(chunkkv, context)
        for scorer in (staggered, dithered, unstaggered):
            got = _cache(scorer, context)
            assert [layer.keys.shape for layer in got.layers] == [layer.keys.shape for layer in expected.layers]
            moved += scorer is staggered and any(
                not torch.equal(a.keys, b.keys) for a, b in zip(got.layers, expected.layers, strict=True)
            )
        for got, want in zip(_cache(unstaggered, context).layers, expected.layers, strict=True):  # ChunkKV exactly
            torch.testing.assert_close(got.keys, want.keys, rtol=0, atol=0)
            torch.testing.assert_close(got.values, want.values, rtol=0, atol=0)
    assert moved  # the staggered layers did move their cuts
    seen = staggered.press.grid_record()["layer_compressions_by_offset"]
    assert set(seen) == {str(o) for o in range(8)}  # 10 layers: every offset, layers 8 and 9 at 0 and 1 again


@needs_kvpress
def test_in_a_model_the_dithered_press_moves_every_layer_by_the_prompts_offset_and_repeats_itself():
    model = _model(4)
    draw = torch.Generator().manual_seed(2)
    contexts = [torch.randint(5, len(word_tokenizer()), (1, 45), generator=draw) for _ in range(12)]
    dithered = _scorer(DITHERED.format(inner=KNORM, seed=0), model)
    offsets = [dither_offset(c[0].tolist(), 0, 8) for c in contexts]
    assert len(set(offsets)) > 1
    for context, offset in zip(contexts, offsets, strict=True):
        at_offset = _scorer(STAGGERED.format(inner=KNORM, stagger=0), model)  # every layer at grid_offset
        with at_offset.grid_offset(offset):
            want = _cache(at_offset, context)
        got, again = _cache(dithered, context), _cache(dithered, context)
        for a, b, c in zip(got.layers, again.layers, want.layers, strict=True):
            torch.testing.assert_close(a.keys, c.keys, rtol=0, atol=0)
            torch.testing.assert_close(b.keys, a.keys, rtol=0, atol=0)  # the same prompt, the same offset
    record = dithered.press.grid_record()
    assert record["seed"] == 0 and "sha256" in record["rule"]
    assert record["prefills_by_offset"] == {str(o): 2 * offsets.count(o) for o in sorted(set(offsets))}
    assert dithered.press.current_offset is None  # the hook is gone after the prefill
    other = next(i for i, offset in enumerate(offsets) if offset != offsets[0])
    with pytest.raises(ValueError, match="one prompt at a time"), torch.no_grad():
        dithered.compressed_cache(torch.cat([contexts[0], contexts[other]]))  # two offsets in one prefill
    assert dithered.press.current_offset is None


@needs_kvpress
def test_the_scorers_count_chunkkvs_kept_entries_for_both_variants_and_record_the_grid():
    model = _model(3)
    draw = torch.Generator().manual_seed(3)
    sequences = torch.randint(5, len(word_tokenizer()), (6, 90), generator=draw).tolist()
    records = {}
    for name in ("chunkkv8", "chunkkv8-staggered", "chunkkv8-dithered"):
        scorer = _scorer(name, model, batch_size=6, workers=1)
        scorer.logprobs(sequences, 3)
        records[name] = scorer.describe()["press"]
    assert records["chunkkv8-staggered"]["kv_entries"] == records["chunkkv8"]["kv_entries"]
    assert records["chunkkv8-dithered"]["kv_entries"] == records["chunkkv8"]["kv_entries"]
    assert records["chunkkv8-staggered"]["grid"]["stagger"] == 1
    assert records["chunkkv8-dithered"]["grid"]["seed"] == 0 and "seed=0" in records["chunkkv8-dithered"]["built"]
    assert sum(records["chunkkv8-dithered"]["grid"]["prefills_by_offset"].values()) == 6


@needs_kvpress
def test_the_staggered_press_takes_the_grid_shift_and_the_dithered_press_refuses_it(qwen_dir):
    from phasekv.scoring import load_scorer
    from phasekv.scoring.press import build_press
    from phasekv.scoring.press_spec import PressSpecError
    from phasekv.studies.probe.run import run_lookup
    from phasekv.tasks.lookup import LookupOptions

    staggered = load_scorer(qwen_dir, press="chunkkv8-staggered")
    assert staggered.grid_shift_refusal is None
    with staggered.grid_offset(5):
        assert staggered.press.grid_offset == 5 and staggered.press.stagger == 1  # every layer moved by 5
    assert staggered.press.grid_offset == 0
    assert build_press(parse_press("chunkkv8-staggered"), grid_offset=2).grid_offset == 2
    dithered = load_scorer(qwen_dir, press="chunkkv8-dithered", batch_size=64)
    with pytest.raises(ValueError, match="no fixed grid"), dithered.grid_offset(1):
        pass
    with pytest.raises(PressSpecError, match="no fixed grid"):
        build_press(parse_press("chunkkv8-dithered"), grid_offset=1)
    options = LookupOptions(n_records=12, n_demos=2, modulus=8, n_mappings=2, seed=3)
    with pytest.raises(ValueError, match="no fixed grid"):
        run_lookup(dithered, options, n_resamples=50, progress=False, grid_shift=True)
    assert dithered.counter.prefills == 0  # refused before any scoring
    result = run_lookup(dithered, options, n_resamples=50, progress=False)  # without --grid-shift it runs
    assert result["model"]["press"]["grid"]["seed"] == 0
    assert result["phase_test"]["grid_shift"] is None and result["phase_test"]["period"] == 8
    assert "cannot be moved" in result["phase_test"]["basis"]  # not "run with --grid-shift"
