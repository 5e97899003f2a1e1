"""Non-finite model outputs stop a run with one clear error before any result is written: a checkpoint with NaN
weights (phasekv or Hugging Face), a model whose outputs turn NaN at one position, a server that answers NaN."""

from __future__ import annotations

import json
import math

import pytest
import torch
from typer.testing import CliRunner

import phasekv
from conftest import save_with_tokenizer, tiny_qwen3, word_tokenizer
from phasekv.cli import app
from phasekv.model import PhaseKVModel, preset_config
from phasekv.scoring import NonFiniteOutput, PhaseKVScorer
from phasekv.serve.server import CompletionHandler

LOOKUP = ["--records", "8", "--demos", "2", "--modulus", "8", "--mappings", "2", "--resamples", "20", "--quiet"]


def _with_nan_weight(model):
    """`model` with one weight matrix of its first layer NaN, as a diverged training run leaves it."""
    weight = next(p for name, p in model.named_parameters() if "layers.0" in name and p.dim() == 2)
    with torch.no_grad():
        weight.fill_(math.nan)
    return model


def _phasekv_model():
    torch.manual_seed(0)
    return PhaseKVModel(preset_config("w8s4-1kv", "tiny", vocab_size=len(word_tokenizer())))


@pytest.mark.parametrize("kind", ["phasekv", "hf"])
def test_eval_lookup_of_a_checkpoint_with_nan_weights_stops_with_one_line_and_writes_nothing(tmp_path, kind):
    model = _phasekv_model() if kind == "phasekv" else tiny_qwen3(len(word_tokenizer()))
    directory = save_with_tokenizer(_with_nan_weight(model), tmp_path / "model")
    out = tmp_path / "lookup.json"
    run = CliRunner().invoke(app, ["eval", "lookup", str(directory), *LOOKUP, "--out", str(out)])
    assert run.exit_code == 2, run.output
    line = run.output.strip().splitlines()[-1]
    assert line.startswith("phasekv eval: error: ") and f"{directory} gave a non-finite log-prob (nan)" in line
    assert "at position " in line and "check the checkpoint for NaN/inf weights" in line
    assert not out.exists()


@pytest.mark.parametrize("mode", ["heads", "layers"])
def test_a_knockout_of_a_checkpoint_with_nan_weights_stops_and_writes_nothing(tmp_path, mode):
    """The knockout reads the model's logits directly, not through its scorer: checked all the same."""
    directory = save_with_tokenizer(_with_nan_weight(_phasekv_model()), tmp_path / "model")
    args = ["knockout", str(directory), "--records", "8", "--demos", "2", "--modulus", "8", "--mappings", "2"]
    args += ["--calibration-mappings", "2", "--quiet", "--out", str(tmp_path / "out")]
    run = CliRunner().invoke(app, args + (["--layers"] if mode == "layers" else []))
    assert run.exit_code == 2, run.output
    assert "gave a non-finite log-prob (nan) at position " in run.output.strip().splitlines()[-1]
    assert not list((tmp_path / "out").glob("*.json"))


def test_the_python_api_raises():
    with pytest.raises(NonFiniteOutput, match="non-finite log-prob"):
        phasekv.probe(_with_nan_weight(_phasekv_model()), "lookup", n_records=8, n_demos=2, modulus=8, n_mappings=2)


class _NanFrom(PhaseKVScorer):
    """A scorer whose model's outputs turn NaN at token positions >= `start` of prompts longer than `longer`."""

    start, longer = 0, 0

    def _logits(self, input_ids, positions):
        logits = super()._logits(input_ids, positions)
        ends = (input_ids != self.pad_id).sum(-1, keepdim=True)  # no pad id in these prompts
        logits[(positions >= self.start) & (ends > self.longer)] = math.nan
        return logits


def test_the_error_names_the_prompt_in_the_callers_order_and_the_first_non_finite_position():
    scorer = _NanFrom(_phasekv_model(), batch_size=2, workers=1)
    scorer.start, scorer.longer = 7, 10
    prompts = [[5] * 12, [5] * 9, [5] * 11, [5] * 9]  # scored sorted by length: the 12-token prompt comes last
    with pytest.raises(NonFiniteOutput) as caught:
        scorer.logprobs(prompts, n_last=4)
    err = caught.value
    assert (err.prompt, err.position, err.length) == (2, 7, 11)  # 11 tokens, positions 7..10 scored, NaN from 7
    assert "position 7 of prompt 2 (11 tokens)" in str(err)
    scorer.longer = 12  # no prompt is longer: nothing non-finite, nothing raised
    assert torch.isfinite(scorer.logprobs(prompts, n_last=4)).all()


class _NanServer(CompletionHandler):
    """`phasekv serve`'s handler answering NaN for the log-prob of every prompt token from index 6 on (echo), as a
    broken engine does; the canary prompts every audit starts with are answered untouched."""

    def send_json(self, status, body, headers=None):
        logprobs = (body.get("choices") or [{}])[0].get("logprobs")
        if logprobs and len(logprobs["tokens"]) > 20:  # the 12-token canaries are shorter than a lookup prompt
            for p in range(6, len(logprobs["tokens"])):
                logprobs["token_logprobs"][p] = math.nan
        super().send_json(status, body, headers)


def test_a_served_nan_stops_an_endpoint_audit_and_is_never_cached(tmp_path):
    from serving_helpers import answer_lines, serving

    directory = save_with_tokenizer(_phasekv_model(), tmp_path / "model")
    scorer = PhaseKVScorer.from_checkpoint(directory)
    out, cache = tmp_path / "lookup.json", tmp_path / "cache.jsonl"
    with serving(scorer, _NanServer) as server:
        args = ["eval", "lookup", "--endpoint", server.url + "/v1", "--served-model", "tiny", "--tokenizer"]
        args += [str(directory), "--cache", str(cache), *LOOKUP, "--out", str(out)]
        run = CliRunner().invoke(app, args)
    assert run.exit_code == 2, run.output
    line = run.output.strip().splitlines()[-1]
    assert "tiny at http://127.0.0.1:" in line and "non-finite log-prob (nan) at position 5 of a " in line
    assert not out.exists()
    answers = answer_lines(cache)
    assert not any("NaN" in json.dumps(a) for a in answers)
