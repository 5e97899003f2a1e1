"""The Python entry: phasekv.probe returns each study's typed result, the same as its command's, and refuses bad
options before any model loads."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from typer.testing import CliRunner

import phasekv
from phasekv.cli import app
from phasekv.internals.models import view
from phasekv.internals.probe_prompts import unique_ids
from phasekv.model import PhaseKVModel
from phasekv.model.presets import preset_config
from phasekv.scoring import load_scorer
from phasekv.stats.format import format_verdict
from phasekv.studies.flip import run as flip_run
from phasekv.studies.flip.result import FlipResult
from phasekv.studies.knockout import run as knockout_run
from phasekv.studies.knockout.result import KnockoutResult
from phasekv.studies.probe.result import ProbeResult
from phasekv.tasks import tokenizer

runner = CliRunner()
FLIP = dict(context="y = T . Cast ( FP", n_lengths=8, families=("equals", "lorem"), period=4, n_permutations=50)
FLIP_ARGS = ["--context", FLIP["context"], "--lengths", "8", "--families", "equals,lorem", "--period", "4"]
KNOCKOUT = dict(n_records=8, n_demos=2, modulus=8, n_mappings=2, calibration_mappings=2)
KNOCKOUT_ARGS = ["--records", "8", "--demos", "2", "--modulus", "8", "--mappings", "2", "--calibration-mappings", "2"]


def _rows(spec: dict) -> list[dict]:
    """Every inline data row of a Vega-Lite spec: top-level values, or altair's named `datasets`."""
    rows = list(spec.get("data", {}).get("values", []))
    return rows + [row for named in spec.get("datasets", {}).values() for row in named]


def _answered_by_the_model(monkeypatch, model_dir) -> None:
    """The knockout's evaluation prompts of even mappings get the clean model's own top-1 as their answer (clean
    accuracy 50%, an untrained model's is 0), so knocking a head or layer out changes the map."""
    model = load_scorer(model_dir).model
    plain = knockout_run.lookup_prompts

    def planted(tok, options):
        prompt_set = plain(tok, options)
        if options.split != "eval":
            return prompt_set
        ids, rows = unique_ids(prompt_set.prompts)
        with torch.no_grad():
            top = view(model).final_logits(ids).argmax(-1)[rows]
        prompts = [
            dataclasses.replace(p, answer_ids=[int(top[i])]) if p.unit % 2 == 0 else p
            for i, p in enumerate(prompt_set.prompts)
        ]
        return dataclasses.replace(prompt_set, prompts=prompts)

    monkeypatch.setattr(knockout_run, "lookup_prompts", planted)


def _round_trips(result) -> None:
    again = type(result).from_dict(json.loads(result.to_json()))
    assert again.to_dict() == result.to_dict() and again.summary == result.summary


def test_probe_returns_a_typed_result_with_its_verdict():
    torch.manual_seed(0)
    model = PhaseKVModel(preset_config("w8s4-1kv", vocab_size=len(tokenizer.build_word_tokenizer())))
    result = phasekv.probe(
        model, "lookup", n_records=8, n_demos=2, modulus=8, n_mappings=4, spread_blocks=4, n_resamples=50
    )
    assert isinstance(result, ProbeResult) and result.probe == "lookup"
    assert result.verdict == result.phase_test["verdict"] == "not judged: at chance"  # an untrained model
    assert result.to_dict()["summary"]["modulus"] == 8 and result.phase_test["mde"]["distinct_prompts"] > 0
    assert result.residue_summary.bootstrap_resamples == 50
    # the one-screen text is the verdict's own wording, and the figure is the report's residue chart
    assert str(result) == result.summary and format_verdict(result.phase_test) in result.summary
    assert result.summary.startswith("lookup on ") and f"{100 * result.residue_summary.mean:.1f}%" in result.summary
    spec = result.figure()
    assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite") and "accuracy" in json.dumps(spec)
    assert json.loads(result.to_json())["summary"]["mean"] == result.residue_summary.mean
    _round_trips(result)


def test_flip_is_the_command_run_as_a_typed_result(phasekv_dir, tmp_path):
    result = phasekv.probe(phasekv_dir, "flip", **FLIP)
    assert isinstance(result, FlipResult) and result.probe == "flip"
    out = tmp_path / "flip.json"
    cli = runner.invoke(
        app, ["eval", "flip", str(phasekv_dir), *FLIP_ARGS, "--permutations", "50", "--quiet", "--out", str(out)]
    )
    assert cli.exit_code == 0, cli.output
    written = json.loads(out.read_text())
    for key in ("families", "pattern", "period_scan", "candidates", "options"):
        assert result.to_dict()[key] == written[key], key
    # the summary is what the command prints: its heading (the wall time aside), then the same table
    heading, table = result.summary.split("\n", 1)
    assert heading.startswith(f"flip on {phasekv_dir}: candidates ['8', '32'], wall time ")
    assert cli.output.startswith(heading.split(", wall time")[0]) and table in cli.output
    scan = written["period_scan"]
    assert result.verdict == (
        "no period detected" if scan["detected"] is None else f"period {scan['detected']} detected"
    )
    assert f"period scan (periods 2 to 4, permutation p <= 0.01): {result.verdict}" in result.summary
    spec = result.figure()
    assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite")
    drawn = {(r["family"], r["length"], r["candidate"]): r["p"] for r in _rows(spec) if r.get("kind") == "p"}
    for family, rec in written["families"].items():
        for length, probabilities in zip(rec["lengths"], rec["probabilities"], strict=True):
            assert [drawn[(family, length, c)] for c in ("8", "32")] == pytest.approx(probabilities, rel=1e-5)
    _round_trips(result)


def test_knockout_of_a_phasekv_model_is_the_command_run_as_a_typed_result(phasekv_dir, tmp_path, monkeypatch):
    _answered_by_the_model(monkeypatch, phasekv_dir)
    result = phasekv.probe(phasekv_dir, "knockout", **KNOCKOUT)
    assert isinstance(result, KnockoutResult) and result.mode == "heads" and result.verdict is None
    cli = runner.invoke(app, ["knockout", str(phasekv_dir), *KNOCKOUT_ARGS, "--quiet", "--out", str(tmp_path)])
    assert cli.exit_code == 0, cli.output
    written = json.loads((tmp_path / "knockout.json").read_text())
    for key in ("options", "knockout_options", "calibration", "clean", "targets"):
        assert result.to_dict()[key] == written[key], key
    assert result.clean.accuracy_by_phase == pytest.approx([0.5] * 4)  # the planted answers
    assert any(any(c != 0 for c in t.change_by_residue) for t in result.targets)  # knockouts change the map
    assert cli.output.startswith(result.summary + "\n") and str(result) == result.summary
    assert "\nclean % " + "   50.0" * 4 + "\n" in result.summary
    spec = result.figure()
    cells = {(r["label"], r["position"]): r["points"] for r in _rows(spec) if r.get("kind") == "residue"}
    for target in written["targets"]:
        label = f"L{target['layer']}H{target['kv_head']}"
        drawn = [cells[(label, r)] for r in range(8)]
        assert drawn == pytest.approx([100 * c for c in target["change_by_residue"]], abs=0.006)
    _round_trips(result)


def test_knockout_of_a_hugging_face_model_knocks_out_its_layers(qwen_dir, tmp_path, monkeypatch):
    _answered_by_the_model(monkeypatch, qwen_dir)
    result = phasekv.probe(qwen_dir, "knockout", mode="layers", **KNOCKOUT)
    assert result.mode == "layers" and [(t.layer, t.kv_head) for t in result.targets] == [(0, None), (1, None)]
    cli = runner.invoke(
        app,
        ["knockout", str(qwen_dir), "--layers", *KNOCKOUT_ARGS, "--quiet", "--out", str(tmp_path)],
    )
    assert cli.exit_code == 0, cli.output
    written = json.loads((tmp_path / "knockout.json").read_text())
    for key in ("options", "knockout_options", "clean", "targets"):
        assert result.to_dict()[key] == written[key], key
    assert result.clean.accuracy_by_phase == pytest.approx([0.5] * 4)
    assert result.summary + "\n" in cli.output  # after the weights' loading bar
    with pytest.raises(ValueError, match="per-KV-head knockouts need a phasekv model"):
        phasekv.probe(qwen_dir, "knockout", **KNOCKOUT)


class _Captured(Exception):
    pass


@pytest.mark.parametrize(
    "probe, module, function, command",
    [("flip", flip_run, "run_flip", ["eval", "flip"]), ("knockout", knockout_run, "run_knockout", ["knockout"])],
)
def test_the_defaults_are_the_commands(probe, module, function, command, phasekv_dir, monkeypatch):
    """With no options, the API runs the design its command runs with none (one place for the defaults)."""
    seen = []

    def capture(scorer, *options, **_):
        seen.append(options)
        raise _Captured

    monkeypatch.setattr(module, function, capture)
    with pytest.raises(_Captured):
        phasekv.probe(phasekv_dir, probe)
    runner.invoke(app, [*command, str(phasekv_dir), "--quiet"], catch_exceptions=True)
    assert len(seen) == 2 and seen[0][:2] == seen[1][:2]  # the options (the knockout's command adds its planner)


def test_bad_options_are_refused_before_any_model_loads(tmp_path):
    missing = tmp_path / "missing"
    with pytest.raises(TypeError, match=r"unknown lookup option.*'n_records'.*LookupOptions and the run's"):
        phasekv.probe(missing, "lookup", n_recrods=8)
    with pytest.raises(TypeError, match=r"unknown flip option\(s\) \['n_lenghts'\].*'n_lengths'.*FlipOptions"):
        phasekv.probe(missing, "flip", n_lenghts=8)
    with pytest.raises(TypeError, match=r"unknown knockout option.*'calibration_mappings'.*'n_records'"):
        phasekv.probe(missing, "knockout", n_resamples=50)  # a lookup run's keyword, not the knockout's
    with pytest.raises(ValueError, match="at least two distinct candidates"):
        phasekv.probe(missing, "flip", candidates=("8",))
    with pytest.raises(ValueError, match="unknown knockout mode 'sideways'"):
        phasekv.probe(missing, "knockout", mode="sideways")
    with pytest.raises(
        TypeError, match=r"like= re-measures the results of the residue probes \(lookup, needle.*\), not flip"
    ):
        phasekv.probe(missing, "flip", like=missing)
    with pytest.raises(ValueError, match="probe must be one of"):
        phasekv.probe(missing, "sideways")
    with pytest.raises(TypeError, match="model folder, a PhaseKVModel or a scorer"):
        phasekv.probe(42, "lookup")
