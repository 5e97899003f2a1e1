"""The typed probe result: a real lookup result round-trips, files of earlier runs (without the fields
added later) still load, and a bad file names itself and the bad field."""

from __future__ import annotations

import json

import pytest

from phasekv.evaluate import run_lookup, write_results
from phasekv.results import ResultFileError
from phasekv.scoring import load_scorer
from phasekv.studies.probe.result import ProbeResult, learned
from phasekv.tasks.lookup import LookupOptions


@pytest.fixture(scope="module")
def lookup_file(qwen_dir, tmp_path_factory):
    options = LookupOptions(n_records=12, n_demos=2, modulus=6, n_mappings=4, seed=0)
    result = run_lookup(load_scorer(qwen_dir, batch_size=32), options, n_resamples=100, progress=False)
    return write_results(result, tmp_path_factory.mktemp("lookup") / "lookup.json")


def test_a_lookup_result_round_trips(lookup_file, tmp_path):
    result = ProbeResult.load(lookup_file)
    data = json.loads(lookup_file.read_text())
    assert result.schema_version == 1 and result.probe == "lookup" and result.summary.modulus == 6
    assert result.summary.uniformity.p_value == data["summary"]["uniformity"]["p_value"]
    assert result.extra("prompt_records")["n"] == data["n_prompts"]  # untyped fields are kept
    assert result.to_dict() == data
    assert json.loads(result.write(tmp_path / "again.json").read_text()) == data
    assert result.learned() == learned(data)
    assert not result.compressed  # a Qwen3 model without a press


def test_a_file_of_an_earlier_run_loads(lookup_file, tmp_path):
    """Before the model record named its compression stride and before the bootstrap intervals and the phase
    test were stored: the stride's source says whether the model compressed, and `learned` cannot be judged."""
    data = json.loads(lookup_file.read_text())
    for key in ("phase_test", "cell_accuracy", "aggregation", "prompt_records"):
        data.pop(key, None)
    for key in ("stat_intervals", "stat_interval_methods", "n_mappings", "trials_per_cell"):
        data["summary"].pop(key, None)
    data["model"].pop("compression_stride")
    data["stride"] = {"value": 8, "source": "model config (compression stride)"}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data))
    old = ProbeResult.load(path)
    assert old.compressed and old.learned() is None and old.phase_test is None
    with pytest.raises(ValueError, match="bootstrap interval"):
        learned(old)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["summary"].pop("ci_high"), "summary.ci_high: Field required"),
        (lambda d: d["summary"].__setitem__("mean", "high"), "summary.mean: Input should be a valid number"),
        (lambda d: d["summary"].__setitem__("ci_low", [0.0]), "accuracy, ci_low and ci_high must be lists"),
        (lambda d: d.__setitem__("probe", "flip"), "probe: Input should be 'lookup' or 'needle'"),
        (lambda d: d.__setitem__("schema", "phasekv.eval/9"), "this phasekv reads versions"),
        (lambda d: d.pop("stride"), "stride: Field required"),
    ],
)
def test_a_bad_file_names_the_file_and_the_field(lookup_file, tmp_path, change, message):
    data = json.loads(lookup_file.read_text())
    change(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ResultFileError, match=f"{path}: .*{message}"):
        ProbeResult.load(path)


def test_unreadable_files_are_clear_errors(tmp_path):
    (tmp_path / "cut.json").write_text('{"schema": ')
    with pytest.raises(ResultFileError, match="cut.json: not valid JSON"):
        ProbeResult.load(tmp_path / "cut.json")
    with pytest.raises(ResultFileError, match="missing.json: cannot be read"):
        ProbeResult.load(tmp_path / "missing.json")
