"""`phasekv conformance`: a correct implementation conforms in every mode at float32 tolerance, and planted
bugs (each a plausible engine mistake, planted by patching a copy of a tiny model) are found in the right
modes and at the right phase; the result loads as its typed format and draws."""

import copy
import dataclasses
import json

import pytest
import torch

from conftest import needs_dsv4, randomize, tiny_dsv4
from phasekv.compress.windows import WindowGeometry
from phasekv.model import PhaseKVModel, preset_config
from phasekv.serve.server import CompletionHandler
from phasekv.studies.conformance.result import ConformanceResult
from phasekv.studies.conformance.run import (
    ConformanceOptions,
    HFRunner,
    PhaseKVRunner,
    format_conformance,
    prompts,
    run_conformance,
)

W = S = 8  # w8s8-1kv
OPTIONS = ConformanceOptions(length=40, prompts=2, seed=1)


def _model(name="w8s8-1kv", vocab_size=64):
    return randomize(PhaseKVModel(preset_config(name, vocab_size=vocab_size)), seed=3, std=0.1).eval()


def _compressors(model):
    return [layer.self_attn.compressor for layer in model.layers]


def _planted(model, plant):
    """A copy of `model` with `plant(copy)` applied: the reference stays correct."""
    buggy = copy.deepcopy(model)
    plant(buggy)
    return buggy


def _run(candidate, reference, **options):
    return run_conformance(
        PhaseKVRunner(candidate, "candidate"),
        dataclasses.replace(OPTIONS, **options),
        reference=None if reference is None else PhaseKVRunner(reference, "reference"),
    )


@pytest.mark.parametrize("name", ["w8s8-1kv", "w8s4-1kv", "dsv4-mix"])
def test_a_correct_implementation_conforms_in_every_mode_at_float32_tolerance(name):
    result = _run(_model(name), None)
    assert result["conforms"], result["failing_modes"]
    stride = result["stride"]["value"]
    assert {"parallel", "decode", "split@0", f"split@{stride - 1}", "fork", "right-padded", "left-padded"} <= set(
        result["modes"]
    )
    assert not result["undefined_modes"]
    assert all(m["first_failure"] is None for m in result["modes"].values())
    assert result["verdict"] == "conforms" and result["reference_repeat"]["max_abs_delta"] == 0.0
    ConformanceResult.from_dict(json.loads(json.dumps(result)))


class _FirstForwardOff(PhaseKVRunner):
    """A reference that is not reproducible in its process: its first forward's logits carry seeded noise of
    `size`, every later forward is exact (as a reference was seen to behave once, under heavy machine load)."""

    def __init__(self, model, name="first forward off", size=1e-3):
        super().__init__(model, name)
        self.size, self.forwards = size, 0

    def logits(self, ids):
        out = super().logits(ids)
        self.forwards += 1
        if self.forwards > 1:
            return out
        return out + self.size * torch.randn(out.shape, generator=torch.Generator().manual_seed(0))


def test_a_reference_whose_forward_does_not_repeat_leaves_the_modes_not_judged_instead_of_failing_them():
    """Every mode would differ from such a reference by its own irreproducibility, from position 0, a correct
    candidate included: the run says the reference is not reproducible, by how much, and judges nothing."""
    model = _model()
    for reference in (None, _FirstForwardOff(model)):  # the candidate's own forward, or another reference's
        candidate = _FirstForwardOff(model) if reference is None else PhaseKVRunner(model, "candidate")
        result = run_conformance(candidate, dataclasses.replace(OPTIONS, modes=("parallel", "decode")), reference)
        assert result["verdict"] == "not judged" and result["conforms"] is None
        assert result["modes"] == {} and result["failing_modes"] == []  # no mode blamed
        repeat = result["reference_repeat"]
        assert not repeat["conforms"] and repeat["first_failure"] == 0 and 1e-4 < repeat["max_abs_delta"] < 1e-2
        assert result["not_judged"].startswith("the reference (first forward off) is not reproducible in this process")
        assert f"{repeat['max_abs_delta']:.1e}" in result["not_judged"]
        assert format_conformance(result).endswith("not judged: " + result["not_judged"])
        assert ConformanceResult.from_dict(json.loads(json.dumps(result))).verdict == "not judged"
    # noise within the tolerance is judged: the check asks for agreement to the tolerance, not to the bit
    quiet = run_conformance(_FirstForwardOff(model, size=1e-7), dataclasses.replace(OPTIONS, modes=("parallel",)))
    assert quiet["verdict"] == "conforms" and 0 < quiet["reference_repeat"]["max_abs_delta"] < OPTIONS.tolerance


class _EarlyGeometry(WindowGeometry):
    def window_end(self, j):
        return super().window_end(j) - 1  # visible one token before the window is complete


class _ShiftedRope(WindowGeometry):
    def rope_position(self, j):
        return super().rope_position(j) + 1


def _regeometry(cls):
    def plant(model):
        for comp in _compressors(model):
            comp.geometry = cls(**dataclasses.asdict(comp.geometry))

    return plant


def test_an_entry_visible_one_token_early_is_found_at_phase_s_minus_2_where_a_call_holds_its_window():
    model = _model()
    result = _run(_planted(model, _regeometry(_EarlyGeometry)), model, modes=("parallel", "decode", "chunk 9"))
    assert result["failing_modes"] == ["parallel", "chunk 9"]
    # one token at a time the entry is only written when its window completes, so decoding cannot read it early
    assert result["modes"]["decode"]["conforms"]
    for mode in ("parallel", "chunk 9"):
        m = result["modes"][mode]
        assert m["first_failure"] == W - 2 and m["first_failure_phase"] == S - 2
        assert m["concentration"]["peak_phase"] == S - 2


def test_an_entry_key_rotated_at_the_wrong_position_is_found_where_the_first_entry_becomes_visible():
    model = _model()
    result = _run(_planted(model, _regeometry(_ShiftedRope)), model, modes=("parallel", "decode"))
    for m in result["modes"].values():
        assert not m["conforms"] and m["first_failure"] == W - 1  # the first window's entry, read from t = W-1


def test_a_left_padded_batch_whose_windows_are_cut_on_the_padded_index_fails_from_the_first_entrys_visibility():
    """The batch's rows are cut by 3 and 8 tokens (37 and 32 of 40), so the second is left-padded by 5. An engine
    that lays its windows from the padded row's index 0 (pads masked out of the pooling) moves that row's grid
    by -5 mod S = 3: its first entry is not there at t = W-1, where the reference reads it."""
    model = _model()
    modes = ("parallel", "right-padded", "left-padded")
    correct = run_conformance(PhaseKVRunner(model, "correct"), dataclasses.replace(OPTIONS, modes=modes))
    assert correct["conforms"] and correct["modes"]["left-padded"]["max_abs_delta"] < 1e-5
    cut_on_padded_index = PhaseKVRunner(model, "windows from the padded index")
    cut_on_padded_index.grid_origin = lambda pad: 0
    result = run_conformance(cut_on_padded_index, dataclasses.replace(OPTIONS, modes=modes))
    assert result["failing_modes"] == ["left-padded"]  # the unpadded row and the right-padded batch are right
    m = result["modes"]["left-padded"]
    assert m["first_failure"] == W - 1 and m["first_failure_phase"] == S - 1
    assert m["positions"] == 37 + 32 and 0 < m["beyond_tolerance"] <= 32  # the padded row's positions only
    alone = run_conformance(cut_on_padded_index, dataclasses.replace(OPTIONS, prompts=1, modes=modes))
    assert set(alone["undefined_modes"]) == {"right-padded", "left-padded"}  # one prompt: nothing to pad, no verdict


def _drop_partial_window_after_a_chunk(model):
    """After a prefill chunk (a call of several tokens), the compressor inputs kept for the unfinished window
    are lost (zeros in their place)."""
    for layer in model.layers:
        attn = layer.self_attn
        forward = attn.forward

        def patched(x, start=0, state=None, forward=forward):
            out = forward(x, start, state)
            if state is not None and x.shape[1] > 1:
                state.hidden = torch.zeros_like(state.hidden)
            return out

        attn.forward = patched


def test_a_chunked_prefill_that_drops_the_partial_window_fails_only_where_chunk_boundaries_cut_windows():
    model = _model()
    result = _run(_planted(model, _drop_partial_window_after_a_chunk), None)
    modes = result["modes"]
    for ok in ("parallel", "decode", "split@0", f"chunk {S}", "chunk 61"):  # boundaries at window edges, or none
        assert modes[ok]["conforms"], ok
    for bad in ("split@3", f"split@{S - 1}", f"chunk {S - 1}", f"chunk {S + 1}", "chunk 7", "fork"):
        assert not modes[bad]["conforms"], bad
    assert modes["split@3"]["first_failure"] == W - 1  # window 0 was cut at position 3: its entry is wrong


def _decode_skips_the_first_window(model):
    """One-token calls never see the first window's entry."""
    for layer in model.layers:
        attn = layer.self_attn
        memory = attn._memory

        def patched(x, start, state, memory=memory):
            mem = memory(x, start, state)
            if x.shape[1] == 1 and mem.num_entries:
                mem.entry_end = mem.entry_end.clone()
                mem.entry_end[0] = 10**9
            return mem

        attn._memory = patched


def test_a_decode_path_that_skips_the_first_window_fails_in_decode_only_from_the_first_window():
    model = _model()
    result = _run(
        _planted(model, _decode_skips_the_first_window), None, modes=("parallel", "decode", "chunk 8", "fork")
    )
    modes = result["modes"]
    assert modes["parallel"]["conforms"] and modes["chunk 8"]["conforms"] and modes["fork"]["conforms"]
    decode = modes["decode"]
    assert not decode["conforms"] and decode["first_failure"] == W - 1 and decode["concentration"]["from_first_window"]
    assert result["failing_modes"] == ["decode"]


@pytest.mark.parametrize(
    ("plant", "with_echo", "without_echo"),
    [
        (None, None, None),
        (_regeometry(_EarlyGeometry), W - 2, W - 1),
        (_regeometry(_ShiftedRope), W - 1, W - 1),
        (_decode_skips_the_first_window, None, W - 1),
    ],
    ids=["correct", "entry-early", "rope-shifted", "decode-skips-first-window"],
)
def test_a_served_model_is_checked_through_phasekv_serve_with_and_without_echo(
    tmp_path, plant, with_echo, without_echo
):
    """The served mode over HTTP from `phasekv serve`'s server, a planted bug in the served copy, the correct model
    as the local reference: prompt-token log-probs from one echo request per prompt, and from one request per
    position (as for a server that ignores echo; the default top 20, so the next token's log-prob is mostly
    unknown and the server's top-20 log-probs are compared instead). A correct server conforms both ways; each bug
    is found both ways, where it starts: an entry visible one token early shows at t = W-2 only inside a longer
    call, so one request per position (t the last token) finds it at W-1, through the layers below. A one-token
    call that skips the first window is invisible with echo but found without: the server's scorer runs the
    position it is asked for through the last layer's incremental (one-token) path."""
    from conftest import save_with_tokenizer, word_tokenizer
    from phasekv.scoring import PhaseKVScorer
    from phasekv.serve import EndpointScorer
    from phasekv.studies.conformance.run import EndpointRunner
    from serving_helpers import FAST, serving

    tokenizer = word_tokenizer()
    model = _model(vocab_size=len(tokenizer))
    save_with_tokenizer(model, tmp_path / "reference")
    options = dataclasses.replace(OPTIONS, length=24)
    with serving(PhaseKVScorer(model if plant is None else _planted(model, plant), tokenizer)) as server:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        results = {}
        for echo in (True, False):
            endpoint = EndpointScorer(url, "tiny", tmp_path / "reference", echo=echo, **FAST)
            results[echo] = run_conformance(EndpointRunner(endpoint), options, reference=PhaseKVRunner(model, "local"))
    no_echo = results[False]["candidate"]
    assert no_echo["answer_requests"] == "one per answer token (no echo)" and no_echo["logprobs_outside_top_k"] > 30
    for echo, first in ((True, with_echo), (False, without_echo)):
        result = results[echo]
        m = result["modes"]["served"]
        assert list(result["modes"]) == ["served"] and m["max_kl"] is None  # no full distributions over HTTP
        assert m["positions"] == 2 * 23 and m["first_failure"] == first and result["conforms"] == (first is None)
        if first is None:
            assert m["max_abs_delta"] < 1e-5 and m["top1_agreement"] == 1.0
        else:
            assert m["first_failure_phase"] == first % S and m["max_abs_delta"] > 1e-2


class _LaterWindowsEarly(WindowGeometry):
    def window_end(self, j):
        return super().window_end(j) - (j >= 2).long()  # from the third window on, past the 12-token canaries


@pytest.mark.parametrize("echo", ["--echo", "--no-echo"])
def test_the_command_checks_a_served_engine_as_it_answers_now(tmp_path, monkeypatch, echo):
    """`phasekv conformance REFERENCE --endpoint URL` as an engine's CI runs it, twice on one port: a correct engine
    (exit 0), then a changed one whose third window's entry is visible a token early (exit 1, from t = W+2S-2 with
    echo, W+2S-1 without). The change lies past the canary prompts, so only answers asked for now can show it:
    the command keeps no results cache unless --cache names one."""
    import socket

    from typer.testing import CliRunner

    from conftest import save_with_tokenizer, word_tokenizer
    from phasekv.cli import app
    from phasekv.scoring import PhaseKVScorer
    from serving_helpers import serving

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # where a default results cache would go
    tokenizer = word_tokenizer()
    model = _model(vocab_size=len(tokenizer))
    save_with_tokenizer(model, tmp_path / "reference")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = ["conformance", str(tmp_path / "reference"), "--endpoint", f"http://127.0.0.1:{port}", "--served-model"]
    args += ["tiny", echo, "--length", "26", "--prompts", "1", "--out", str(tmp_path / "out")]
    codes = []
    for served in (model, _planted(model, _regeometry(_LaterWindowsEarly))):
        with serving(PhaseKVScorer(served, tokenizer), port=port):
            run = CliRunner().invoke(app, args)
        codes.append(run.exit_code)
    assert codes == [0, 1], run.output
    m = json.loads((tmp_path / "out" / "conformance.json").read_text())["modes"]["served"]
    assert m["first_failure"] == W + 2 * S - 2 + (echo == "--no-echo")
    assert not (tmp_path / "cache").exists()


class _EchoIgnoringHandler(CompletionHandler):
    """`phasekv serve`'s handler with `echo` dropped from every request: a server that ignores echo, as
    llama.cpp's does, and answers only the tokens after the prompt."""

    def _json_body(self):
        body = super()._json_body()
        if isinstance(body, dict):
            body.pop("echo", None)
        return body


@pytest.mark.parametrize(
    ("plant", "first"),
    [(None, None), (_regeometry(_EarlyGeometry), W - 1), (_decode_skips_the_first_window, W - 1)],
    ids=["correct", "entry-early", "decode-skips-first-window"],
)
def test_a_server_that_ignores_echo_is_checked_one_request_per_position(tmp_path, plant, first):
    """An endpoint scorer left to decide (the command's default) finds that the server ignores echo and asks one
    request per position, each ending there. A correct server conforms; an entry visible one token early is found
    at W-1 (a request ending at t is a decoding step there), and a one-token path that skips the first window,
    invisible to echo requests, is found from W-1 too: each request's last position runs through it."""
    from conftest import save_with_tokenizer, word_tokenizer
    from phasekv.scoring import PhaseKVScorer
    from phasekv.serve import EndpointScorer
    from phasekv.studies.conformance.run import EndpointRunner
    from serving_helpers import FAST, serving

    tokenizer = word_tokenizer()
    model = _model(vocab_size=len(tokenizer))
    save_with_tokenizer(model, tmp_path / "reference")
    served = PhaseKVScorer(model if plant is None else _planted(model, plant), tokenizer)
    options = dataclasses.replace(OPTIONS, length=20)
    with serving(served, _EchoIgnoringHandler) as server:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        endpoint = EndpointScorer(url, "tiny", tmp_path / "reference", **FAST)  # echo left to the scorer to find out
        result = run_conformance(EndpointRunner(endpoint), options, reference=PhaseKVRunner(model, "local"))
    assert result["candidate"]["answer_requests"] == "one per answer token (no echo)"
    m = result["modes"]["served"]
    assert m["positions"] == 2 * 19 and m["first_failure"] == first and result["conforms"] == (first is None)
    if first is None:
        assert m["max_abs_delta"] < 1e-5 and m["top1_agreement"] == 1.0
    else:
        assert m["first_failure_phase"] == S - 1 and m["max_abs_delta"] > 1e-2


def test_the_result_loads_in_the_report(tmp_path):
    from phasekv.report import build_report

    result = _run(_planted(_model(), _decode_skips_the_first_window), None, modes=("parallel", "decode"))
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "conformance.json").write_text(json.dumps(result))
    out = build_report(tmp_path / "results", tmp_path / "report.html", pngs=False)
    assert "conformance" in out.sections
    page = out.html.read_text()
    assert "sec-conformance" in page and "decode: from position 7 (phase 7)" in page


def test_the_command_exits_0_when_it_conforms_1_on_a_planted_bug_3_when_not_judged_and_its_results_load_in_the_report(
    tmp_path, monkeypatch
):
    """`phasekv conformance` as a user runs it: a tiny preset conforms (exit 0); the same preset with a decode
    path that never reads the first window's entry does not (exit 1, decode named from position W-1); with a
    first forward unlike the later ones, the run is not judged (exit 3, the reason printed); the JSON files load
    in `phasekv report`, which draws the conformance section."""
    from typer.testing import CliRunner

    from phasekv.attention.layer import Attention
    from phasekv.cli import app

    runner = CliRunner()
    args = ["conformance", "preset:w8s8-1kv", "--length", "24", "--prompts", "1", "--modes", "parallel,decode,split@3"]
    ok = runner.invoke(app, [*args, "--out", str(tmp_path / "results"), "--name", "correct"])
    assert ok.exit_code == 0, ok.output
    assert "\nconforms\n" in ok.output and (tmp_path / "results" / "correct.png").is_file()

    memory = Attention._memory

    def skips_the_first_window(self, x, start, state):
        mem = memory(self, x, start, state)
        if x.shape[1] == 1 and mem.num_entries:
            mem.entry_end = mem.entry_end.clone()
            mem.entry_end[0] = 10**9
        return mem

    monkeypatch.setattr(Attention, "_memory", skips_the_first_window)
    bad = runner.invoke(app, [*args, "--out", str(tmp_path / "results"), "--name", "buggy"])
    monkeypatch.undo()
    assert bad.exit_code == 1, bad.output
    assert "does not conform: decode" in bad.output and "from position 7 (phase 7)" in bad.output
    written = json.loads((tmp_path / "results" / "buggy.json").read_text())
    assert written["failing_modes"] == ["decode"] and written["modes"]["decode"]["first_failure"] == W - 1

    from phasekv.studies.conformance import run

    monkeypatch.setattr(run, "PhaseKVRunner", _FirstForwardOff)  # what the command loads the preset into
    unsure = runner.invoke(app, [*args, "--out", str(tmp_path / "results"), "--name", "unreproducible"])
    monkeypatch.undo()
    assert unsure.exit_code == 3, unsure.output
    why = "not judged: the reference (preset:w8s8-1kv, float64 naive twin) is not reproducible in this process"
    assert why in unsure.output
    written = json.loads((tmp_path / "results" / "unreproducible.json").read_text())
    assert written["verdict"] == "not judged" and written["modes"] == {}
    assert (tmp_path / "results" / "unreproducible.png").is_file()

    page = tmp_path / "report.html"
    report = runner.invoke(app, ["report", str(tmp_path / "results"), "--out", str(page), "--no-pngs"])
    assert report.exit_code == 0, report.output
    html = page.read_text()
    assert "sec-conformance" in html and "decode: from position 7 (phase 7)" in html
    assert "not judged: the reference (preset:w8s8-1kv, float64 naive twin) is not reproducible" in html


@needs_dsv4
@pytest.mark.parametrize(("layer", "topk"), [("dsv4-hca", None), ("dsv4-csa", 12)])
def test_phasekv_layers_against_transformers_through_the_command(tmp_path, layer, topk):
    """Each side in every mode (transformers' with its own caches) against the other's parallel forward; with a
    top-k of at least the number of entries the indexer has nothing to choose, so the layers agree everywhere."""
    from typer.testing import CliRunner

    from phasekv.cli import app

    args = ["conformance", "--layers-vs-transformers", layer, "--length", "40", "--out", str(tmp_path)]
    res = CliRunner().invoke(app, args + ([] if topk is None else ["--index-topk", str(topk)]))
    assert res.exit_code == 0, res.output
    for side in ("phasekv", "transformers"):
        result = ConformanceResult.load(tmp_path / f"conformance-{side}.json")
        assert result.conforms and result.extra("compared") == "layer output"
        assert {"parallel", "decode", "split@0", "fork", "right-padded"} <= set(result.modes)
        assert all(m.top1_agreement is None and m.max_kl is None for m in result.modes.values())
        assert result.modes["parallel"].max_abs_delta < 1e-4


@needs_dsv4
def test_csa_layers_differ_where_index_scores_tie_at_the_top_k_cut():
    """With top-k 3, phasekv's and transformers' CSA layers each conform to their own parallel forward, but on
    one forked continuation they read different entries at position 33: three entries score exactly 0 (ReLU)
    for the last slot; phasekv takes the lowest row, transformers' torch.topk another."""
    from phasekv.studies.conformance.dsv4_layers import layer_runners

    ours, theirs = layer_runners("csa")
    options = ConformanceOptions(length=48, prompts=2, seed=0, modes=("parallel", "decode", "fork"))
    for candidate in (ours, theirs):
        assert run_conformance(candidate, options)["conforms"]  # each against its own parallel forward
    across = run_conformance(ours, options, reference=theirs)
    assert across["failing_modes"] == ["fork"] and across["modes"]["fork"]["first_failure"] == 33
    # the continuation run_mode forks off (prefix 19 of 48 tokens, other tokens from seed + 1)
    prefix, ids = 19, prompts(options, ours.vocab_size)
    others = torch.randint(0, ours.vocab_size, (2, 48 - prefix), generator=torch.Generator().manual_seed(1))
    forked = torch.cat([ids[:, :prefix], others], dim=1)
    seen = {}
    hook = ours.layer.indexer.hook_index_scores.register_forward_hook(lambda _m, _i, out: seen.update(scores=out))
    apart = (ours.parallel(forked) - theirs.parallel(forked)).abs().amax(-1)  # [2, T]
    hook.remove()
    row = int(apart[:, 33].argmax())
    assert apart[row, :33].max() < 1e-4 < apart[row, 33]
    scores = seen["scores"][row, 33]
    cut = scores.topk(3).values[-1]
    assert cut == 0 and int((scores == cut).sum()) > 3 - int((scores > cut).sum())  # more zeros than slots


def test_a_hugging_face_model_and_its_phasekv_conversion_conform_to_each_other_in_every_kind_of_mode():
    """Qwen3ForCausalLM and the phasekv model its weights load into: each in the cached, padded (both sides,
    the HF model with an attention mask and per-row positions) and forked modes against the other's parallel
    forward, at float32 tolerance."""
    from conftest import qwen3_pair

    hf, ours = qwen3_pair()
    options = dataclasses.replace(OPTIONS, length=24, modes=("parallel", "decode", "split@1", "left-padded", "fork"))
    for candidate, reference in ((HFRunner(hf, "qwen3"), PhaseKVRunner(ours)), (PhaseKVRunner(ours), HFRunner(hf))):
        result = run_conformance(candidate, options, reference=reference)
        assert result["conforms"], format_conformance(result)
        assert list(result["modes"]) == list(options.modes) and result["stride"]["value"] == 4  # no stride: mod 4
        assert all(m["top1_agreement"] == 1.0 and m["max_kl"] < 1e-6 for m in result["modes"].values())


@needs_dsv4
def test_transformers_deepseek_v4_pools_a_left_padded_rows_windows_from_the_padded_index():
    """transformers' DeepseekV4ForCausalLM (CSA S = 4; `index_topk` 64, above the 10 entries, so the indexer has
    nothing to choose) conforms in a right-padded batch but not in a left-padded one: its compressors take no
    attention mask, cut windows from the padded row's index 0 (pad tokens pooled in) and count an entry's
    visibility from the row's real position, so from t = S-1 on a padded row reads an entry made of its pads."""
    model = HFRunner(tiny_dsv4(64, index_topk=64), "deepseek-v4")
    options = dataclasses.replace(OPTIONS, prompts=3, modes=("parallel", "right-padded", "left-padded"))
    result = run_conformance(model, options)
    assert result["stride"]["value"] == 4 and result["failing_modes"] == ["left-padded"], format_conformance(result)
    m = result["modes"]["left-padded"]
    assert m["first_failure"] == 3 and m["first_failure_phase"] == 3 and m["concentration"]["from_first_window"]
    assert result["modes"]["right-padded"]["max_abs_delta"] < 1e-5


def test_a_bug_every_mode_shares_is_found_against_the_float64_twin_and_the_result_says_what_it_rests_on(
    tmp_path, monkeypatch
):
    """A first HCA entry that misses its last token, in the compressor every execution mode calls: against the
    candidate's own parallel forward every mode agrees with it (the blind comparison `--no-twin` makes, and says
    so); against the default reference, the model's float64 naive twin, the parallel forward itself fails from
    the position the entry becomes visible (W - 1 = 15, phase 15 of the HCA ratio 16)."""
    from typer.testing import CliRunner

    from phasekv.cli import app
    from phasekv.compress import dsv4

    cut = dsv4.cut_windows

    def first_window_short(x, geometry, start, emit_from):
        windows = cut(x, geometry, start, emit_from)
        windows.valid[windows.index == 0, -1] = False  # window 0's last slot left out of its entry
        return windows

    monkeypatch.setattr(dsv4, "cut_windows", first_window_short)
    runner = CliRunner()
    args = ["conformance", "preset:dsv4-hca", "--length", "40", "--prompts", "1", "--modes", "parallel,decode,split@3"]
    blind = runner.invoke(app, [*args, "--no-twin", "--out", str(tmp_path), "--name", "self"])
    assert blind.exit_code == 0, blind.output
    assert "compared: each mode against preset:dsv4-hca's own parallel forward: a bug that every mode" in blind.output
    assert "(its float64 naive twin was turned off (--no-twin))" in blind.output
    seen = runner.invoke(app, [*args, "--out", str(tmp_path), "--name", "twin"])
    assert seen.exit_code == 1, seen.output
    result = ConformanceResult.model_validate_json((tmp_path / "twin.json").read_text())
    assert result.comparison.against == "independent" and "float64 naive twin" in result.comparison.text
    assert set(result.failing_modes) == {"parallel", "decode", "split@3"}
    parallel = result.modes["parallel"]
    assert parallel.first_failure == 15 and parallel.by_ratio[0].ratio == 16
    assert parallel.by_ratio[0].first_failure_phase == 15
    monkeypatch.undo()
    correct = runner.invoke(app, [*args, "--out", str(tmp_path), "--name", "correct"])
    assert correct.exit_code == 0, correct.output
    assert json.loads((tmp_path / "correct.json").read_text())["comparison"]["against"] == "independent"


def test_what_cannot_be_run_is_refused_before_any_forward_pass_and_a_run_tells_its_progress():
    """Issue 53: a reference of another vocabulary ended in a RuntimeError after the run; --length 100000 ran for
    minutes without a line."""
    from conftest import tiny_qwen3

    candidate = PhaseKVRunner(_model(vocab_size=64), "ours")
    with pytest.raises(ValueError, match="vocabulary of 64 tokens and the reference wider one of 72: their next-token"):
        run_conformance(candidate, OPTIONS, reference=PhaseKVRunner(_model(vocab_size=72), "wider"))
    hf = HFRunner(tiny_qwen3(64), "qwen")
    longest = hf.max_positions
    with pytest.raises(ValueError, match=f"length {longest + 1} is longer than the {longest} positions qwen reads"):
        run_conformance(candidate, dataclasses.replace(OPTIONS, length=longest + 1), reference=hf)
    with pytest.raises(ValueError, match="of memory, more than the .* available: lower --length"):
        run_conformance(candidate, dataclasses.replace(OPTIONS, length=10**9))
    told = []
    run_conformance(candidate, dataclasses.replace(OPTIONS, modes=("parallel", "decode")), echo=told.append)
    assert told[0] == "reference: parallel forward of 2 prompts x 40 tokens, twice"
    assert told[-2:] == ["mode 1 of 2: parallel ...", "mode 2 of 2: decode ..."]
