"""`phasekv conformance` fails a mode that outputs NaN at the first such position, in process and from a server,
and groups errors by each layer's own compression ratio (a DeepSeek-V4 model's HCA layers by theirs)."""

import dataclasses
import math

import pytest
import torch

from conftest import randomize, save_with_tokenizer, word_tokenizer
from phasekv.model import PhaseKVModel, preset_config
from phasekv.serve.server import CompletionHandler
from phasekv.studies.conformance.run import ConformanceOptions, PhaseKVRunner, format_conformance, run_conformance

OPTIONS = ConformanceOptions(length=40, prompts=2, seed=1)


def _model(name="w8s8-1kv", vocab_size=64):
    return randomize(PhaseKVModel(preset_config(name, vocab_size=vocab_size)), seed=3, std=0.1).eval()


class _DecodeOff(PhaseKVRunner):
    """A runner whose token-by-token decode is off at positions `at` (a slice) by `by` (NaN: a broken kernel)."""

    at, by = slice(15, None, 8), math.nan

    def chunked(self, ids, bounds):
        out = super().chunked(ids, bounds)
        if len(bounds) == ids.shape[1] + 1:  # one token per call: decode
            out[:, self.at] += self.by
        return out


def test_a_mode_that_outputs_nan_fails_from_its_first_nan_position():
    """Decode NaN at t = 7 mod 8 from t = 15: the mode fails there, though every finite position agrees."""
    model = _model()
    options = dataclasses.replace(OPTIONS, modes=("parallel", "decode"))
    result = run_conformance(_DecodeOff(model, "candidate"), options)
    decode = result["modes"]["decode"]
    assert result["modes"]["parallel"]["conforms"] and result["failing_modes"] == ["decode"]
    assert not decode["conforms"] and decode["first_failure"] == 15 and decode["first_failure_phase"] == 7
    assert decode["non_finite"] == decode["beyond_tolerance"] == 2 * 3  # t = 15, 23, 31 in each of 2 prompts
    assert decode["max_abs_delta"] < 1e-4  # the finite positions agree: the column alone would not show it
    assert [p["non_finite"] for p in decode["by_phase"]] == [0] * 7 + [6]
    line = next(x for x in format_conformance(result).splitlines() if x.startswith("decode"))
    assert "FAILS from position 15 (phase 7)" in line and "NaN or inf at 6 positions" in line


def test_a_reference_that_outputs_nan_is_not_judged_and_says_so():
    model = _model()
    with torch.no_grad():
        model.layers[0].mlp.down_proj.weight.fill_(math.nan)
    result = run_conformance(PhaseKVRunner(model, "candidate"), OPTIONS)
    assert result["conforms"] is None and "outputs NaN or inf" in result["not_judged"]


class _NanServer(CompletionHandler):
    """`phasekv serve`'s handler answering NaN for what the model predicts at positions >= 9 (canaries untouched);
    with `ignore_echo`, it drops `echo` as llama.cpp's server does and answers one position per request."""

    ignore_echo = False
    asked: dict = {}  # the completion request being answered (none: a GET of the model list)

    def _json_body(self):
        body = super()._json_body()
        if isinstance(body, dict):
            if self.ignore_echo:
                body.pop("echo", None)
            self.asked = body
        return body

    def send_json(self, status, body, headers=None):
        from serving_helpers import canaries_of

        lp = (body.get("choices") or [{}])[0].get("logprobs")
        prompt = self.asked.get("prompt")
        if lp and prompt is not None and prompt not in canaries_of(self.server):
            if self.asked.get("echo"):  # echoed entry q is the prediction at q - 1
                for q in range(10, len(lp["tokens"])):
                    lp["token_logprobs"][q] = math.nan
            elif len(prompt) - 1 >= 9:  # the one generated entry: the prediction at the prompt's last position
                lp["top_logprobs"][0] = {k: math.nan for k in lp["top_logprobs"][0]}
        super().send_json(status, body, headers)


@pytest.mark.parametrize("ignore_echo", [False, True], ids=["echo", "one-request-per-position"])
def test_a_served_nan_fails_the_served_mode_at_its_first_position(tmp_path, ignore_echo):
    from phasekv.scoring import PhaseKVScorer
    from phasekv.serve import EndpointScorer
    from phasekv.studies.conformance.run import EndpointRunner
    from serving_helpers import FAST, serving

    tokenizer = word_tokenizer()
    model = _model(vocab_size=len(tokenizer))
    save_with_tokenizer(model, tmp_path / "reference")
    handler = type("Handler", (_NanServer,), {"ignore_echo": ignore_echo})
    with serving(PhaseKVScorer(model, tokenizer), handler) as server:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        endpoint = EndpointScorer(url, "tiny", tmp_path / "reference", **FAST)
        result = run_conformance(EndpointRunner(endpoint), dataclasses.replace(OPTIONS, length=20), _reference(model))
    served = result["modes"]["served"]
    assert result["errored_modes"] == {} and result["failing_modes"] == ["served"]
    assert served["first_failure"] == 9 and served["first_failure_phase"] == 1 and served["non_finite"] == 2


def _reference(model):
    return PhaseKVRunner(model, "reference")


@pytest.mark.parametrize(("preset", "stride", "phases"), [("dsv4-hca", 16, {16: 15}), ("dsv4-mix", 4, {4: 3, 16: 15})])
def test_errors_are_grouped_by_each_layers_own_compression_ratio(preset, stride, phases):
    """An error at position 15 of a model whose HCA layers compress 16 tokens: phase 15 of 16, not phase 3 of the
    config's CSA stride 4; a model with both kinds of layers reports both."""
    model = _model(preset)
    candidate = type("Off", (_DecodeOff,), {"at": slice(15, 16), "by": 1.0})(model, "candidate")
    options = dataclasses.replace(OPTIONS, modes=("decode",))
    result = run_conformance(candidate, options, reference=_reference(model))
    decode = result["modes"]["decode"]
    assert result["stride"]["value"] == stride and result["ratios"] == sorted(phases)
    assert decode["first_failure"] == 15 and decode["first_failure_phase"] == 15 % stride
    assert {r["ratio"]: r["first_failure_phase"] for r in decode["by_ratio"]} == phases
    assert [len(r["by_phase"]) for r in decode["by_ratio"]] == sorted(phases)
    others = "".join(f", {p} mod {r}" for r, p in phases.items() if r != stride)
    assert f"from position 15 (phase {15 % stride}{others})" in decode["concentration"]["text"]
