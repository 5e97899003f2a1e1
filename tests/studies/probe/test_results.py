"""The typed probe result: a real lookup result round-trips, files of earlier runs (without the fields
added later) still load, and a bad file names itself and the bad field."""

from __future__ import annotations

import json

import pytest

from phasekv.results import ResultFileError
from phasekv.results.record import write_results
from phasekv.scoring import load_scorer
from phasekv.studies.probe.result import ProbeResult, learned
from phasekv.studies.probe.run import run_lookup
from phasekv.tasks.lookup import LookupOptions


@pytest.fixture(scope="module")
def lookup_file(qwen_dir, tmp_path_factory):
    options = LookupOptions(n_records=12, n_demos=2, modulus=6, n_mappings=4, seed=0)
    result = run_lookup(load_scorer(qwen_dir, batch_size=32), options, n_resamples=100, progress=False)
    return write_results(result, tmp_path_factory.mktemp("lookup") / "lookup.json")


def test_a_lookup_result_round_trips(lookup_file, tmp_path):
    result = ProbeResult.load(lookup_file)
    data = json.loads(lookup_file.read_text())
    assert result.schema_version == 1 and result.probe == "lookup" and result.residue_summary.modulus == 6
    assert result.residue_summary.uniformity.p_value == data["summary"]["uniformity"]["p_value"]
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
        (lambda d: d.__setitem__("probe", "flip"), "probe: Value error, 'flip' is no probe this phasekv knows"),
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


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["summary"]["accuracy"].__setitem__(3, 40.0), r"summary.accuracy\[3\]: 40.0 is outside \[0, 1\]"),
        (lambda d: d["summary"].__setitem__("mean", -5.0), r"summary.mean: -5.0 is outside \[0, 1\]"),
        (lambda d: d["summary"]["ci_high"].__setitem__(0, 1.5), r"summary.ci_high\[0\]: 1.5 is outside \[0, 1\]"),
        (lambda d: d["summary"]["counts"].__setitem__(1, -2), r"summary.counts\[1\]: -2 is outside \[0, inf\]"),
        (lambda d: d["summary"].__setitem__("gap_points", 250.0), r"summary.gap_points: 250.0 is outside \[0, 100\]"),
        (lambda d: d["cell_accuracy"][0].__setitem__(2, 7.0), r"cell_accuracy\[0\]\[2\]: 7.0 is outside \[0, 1\]"),
        (lambda d: d["summary"].__setitem__("mean", d["summary"]["mean"] + 0.2), "summary.mean: .* does not equal"),
        (lambda d: d.__setitem__("n_prompts", -1), r"n_prompts: -1 is outside \[0, inf\]"),
    ],
)
def test_values_out_of_range_or_disagreeing_with_their_cells_are_refused(lookup_file, tmp_path, change, message):
    data = json.loads(lookup_file.read_text())
    change(data)
    path = tmp_path / "lookup.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ResultFileError, match=f"{path}: .*{message}"):
        ProbeResult.load(path)


def test_an_accuracy_that_disagrees_with_its_cells_is_refused(lookup_file, tmp_path):
    """Edited consistently in the summary (accuracy, mean, worst, best, gap, successes) but not in the cells."""
    data = json.loads(lookup_file.read_text())
    s = data["summary"]
    s["accuracy"] = [min(1.0, a + 0.25) for a in s["accuracy"]]
    s["successes"] = [a * n for a, n in zip(s["accuracy"], s["counts"], strict=True)]
    s["mean"], s["worst"], s["best"] = sum(s["accuracy"]) / 6, min(s["accuracy"]), max(s["accuracy"])
    s["gap_points"] = 100 * (s["best"] - s["worst"])
    s["ci_high"] = [1.0] * 6
    path = tmp_path / "lookup.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ResultFileError, match=r"summary.accuracy\[0\]: .* does not equal the mean of its cells"):
        ProbeResult.load(path)
