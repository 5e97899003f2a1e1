"""The Python entry: phasekv.probe returns a typed result, refuses bad options before any model loads."""

from __future__ import annotations

import json

import pytest
import torch

import phasekv
from phasekv.model import PhaseKVModel
from phasekv.model.presets import preset_config
from phasekv.stats.format import format_verdict
from phasekv.studies.probe.result import ProbeResult
from phasekv.tasks import tokenizer


def test_probe_returns_a_typed_result_with_its_verdict():
    torch.manual_seed(0)
    model = PhaseKVModel(preset_config("w8s4-1kv", vocab_size=len(tokenizer.build_word_tokenizer())))
    result = phasekv.probe(
        model, "lookup", n_records=8, n_demos=2, modulus=8, n_mappings=4, spread_blocks=4, n_resamples=50
    )
    assert isinstance(result, ProbeResult) and result.probe == "lookup"
    assert result.verdict == result.phase_test["verdict"] == "not judged: at chance"  # an untrained model
    assert result.to_dict()["summary"]["modulus"] == 8 and result.phase_test["mde"]["distinct_prompts"] > 0
    # the one-screen text is the verdict's own wording, and the figure is the report's residue chart
    assert str(result) == result.summary_text and format_verdict(result.phase_test) in result.summary_text
    assert result.summary_text.startswith("lookup on ") and f"{100 * result.summary.mean:.1f}%" in result.summary_text
    spec = result.figure()
    assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite") and "accuracy" in json.dumps(spec)
    assert json.loads(result.to_json())["summary"]["mean"] == result.summary.mean


def test_bad_options_are_refused_before_any_model_loads(tmp_path):
    with pytest.raises(TypeError, match="unknown lookup option"):
        phasekv.probe(tmp_path / "missing", "lookup", n_recrods=8)
    with pytest.raises(ValueError, match="probe must be one of"):
        phasekv.probe(tmp_path / "missing", "flip")
    with pytest.raises(TypeError, match="model folder, a PhaseKVModel or a scorer"):
        phasekv.probe(42, "lookup")
