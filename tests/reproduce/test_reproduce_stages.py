"""The quick profile's post-training analyses (knockout, gates, cycle, flip, theory) on a miniature
profile: every report section present, results reused on a rerun, training seconds kept from logs."""

import json
from dataclasses import replace

import numpy as np
import pytest

from phasekv.report import build_report
from phasekv.reproduce import RunSpec, get_profile, reproduce
from phasekv.reproduce.cache import cached_result, result_key
from phasekv.reproduce.profiles import QUICK_ANALYSES, Stage
from phasekv.reproduce.runner import logged_training_seconds
from phasekv.reproduce.stages import STUDIES, flip_query, run_stage, run_stages
from phasekv.studies.cycle.options import CycleOptions
from phasekv.studies.flip.pattern import detect_period
from phasekv.studies.flip.run import FlipOptions
from phasekv.studies.gates.options import GatesOptions
from phasekv.studies.knockout.run import KnockoutOptions
from phasekv.studies.theory.options import TheoryOptions
from phasekv.tasks.tokenizer import build_word_tokenizer
from phasekv.theory.theorem1 import Theorem1Config
from phasekv.theory.theorem2 import GateTrainingConfig

# the quick profile's analyses (`QUICK_ANALYSES`), each study at a few seconds' size
TINY_ANALYSES = (
    Stage("knockout", KnockoutOptions(calibration_mappings=2), lookup={"n_mappings": 2, "modulus": 8}),
    Stage("gates", GatesOptions(), lookup={"n_mappings": 1, "modulus": 8}, runs="learned gates"),
    Stage("cycle", CycleOptions((-1, 0, 1), 20), lookup={"n_mappings": 2, "modulus": 8}, preset="w8s8-1kv"),
    Stage("flip", FlipOptions(min_length=0, n_lengths=8, families=("pad", "dots"), n_permutations=50)),
    Stage(
        "theory",
        TheoryOptions(
            theorem1=Theorem1Config(n_starts=2, steps=20),
            theorem2=GateTrainingConfig(steps=20, batch_size=16),
            sweep=GateTrainingConfig(steps=10, batch_size=8),
            sweep_grid={"n_heads": [2, 3]},
        ),
        runs="none",
    ),
)


def _mini_profile():
    quick = get_profile("quick")
    return replace(
        quick,
        name="mini",
        runs=(
            RunSpec("full-1kv", "full-1kv", "Full attention · 1 KV", steps=4),
            RunSpec("w8s8-1kv-s42", "w8s8-1kv", "W8/S8 · 1 KV · seed 42", steps=4),
            RunSpec("w8s8-1kv-uniform", "w8s8-1kv-uniform", "W8/S8 · 1 KV · uniform", steps=4),  # no gates
        ),
        optim=replace(quick.optim, warmup_steps=1),
        lookup=replace(quick.lookup, n_mappings=2, modulus=16, n_records=8, n_demos=2),
        batch_size=2,
        seq_len=128,
        analyses=TINY_ANALYSES,
    )


@pytest.mark.slow
def test_quick_pipeline_writes_every_report_section_and_reuses_results(tmp_path):
    summary = reproduce(_mini_profile(), tmp_path, progress=False)
    assert list(summary["stages"]) == [stage.study for stage in QUICK_ANALYSES] == list(STUDIES)
    analysis = tmp_path / "analysis"
    for name in ("knockout-full-1kv", "knockout-w8s8-1kv-s42", "gates-w8s8-1kv-s42", "cycle-w8s8-1kv-s42"):
        assert (analysis / f"{name}.json").is_file(), name
    assert not (analysis / "gates-full-1kv.json").exists()  # full attention has no gates
    assert not (analysis / "gates-w8s8-1kv-uniform.json").exists()  # nor has uniform averaging
    trajectory = json.loads((analysis / "gate_trajectory-w8s8-1kv-s42.json").read_text())
    assert [s["step"] for s in trajectory["steps"]] == [1, 2, 3, 4]  # every saved checkpoint
    flip = json.loads((analysis / "flip-w8s8-1kv-s42.json").read_text())
    assert set(flip["families"]) == {"pad", "dots"} and flip["period_scan"]["scan"][0]["period"] == 2
    assert {p.name for p in (analysis / "theory").iterdir()} == {"theorem1.json", "theorem2.json", "sweep.json"}
    html = (tmp_path / "report.html").read_text()
    for section in ("residues", "flip", "knockout", "gates", "cycle", "theory"):
        assert f'id="sec-{section}"' in html, section
    assert "left out" not in html and "Theorem 1: free query-independent rules" in html
    seconds = summary["training_seconds"]
    assert set(seconds) == {"full-1kv", "w8s8-1kv-s42", "w8s8-1kv-uniform"} and all(s > 0 for s in seconds.values())

    def stamps():
        return {p: p.stat().st_mtime_ns for folder in (analysis, tmp_path / "results") for p in folder.rglob("*.json")}

    before = stamps()
    again = reproduce(_mini_profile(), tmp_path, progress=False)
    assert again["train_seconds"] == {} and again["training_seconds"] == seconds  # reused, from the logs
    assert json.loads((tmp_path / "summary.json").read_text())["training_seconds"] == seconds
    assert stamps() == before  # every probe result and analysis reused
    assert build_report(tmp_path, tmp_path / "again.html").notes == []

    cycle = next(stage for stage in TINY_ANALYSES if stage.study == "cycle")
    changed = replace(cycle, options=replace(cycle.options, n_resamples=21))
    assert run_stage(_mini_profile(), tmp_path, changed) == [analysis / "cycle-w8s8-1kv-s42.json"]
    recomputed = {p for p, stamp in stamps().items() if stamp != before[p]}
    assert recomputed == {analysis / "cycle-w8s8-1kv-s42.json"}  # only the changed stage's result
    assert json.loads((analysis / "cycle-w8s8-1kv-s42.json").read_text())["bootstrap"]["resamples"] == 21


def test_cached_result_recomputes_only_when_its_record_changes(tmp_path):
    path, calls = tmp_path / "r.json", []

    def compute():
        calls.append(1)
        return {"value": len(calls)}

    first, reused = cached_result(path, {"settings": (1, 2)}, compute)
    assert (first["value"], reused) == (1, False)
    again, reused = cached_result(path, {"settings": (1, 2)}, compute)  # tuple vs JSON list: same record
    assert (again["value"], reused) == (1, True)
    changed, reused = cached_result(path, {"settings": (1, 3)}, compute)
    assert (changed["value"], reused) == (2, False)
    path.write_text("{torn")
    assert cached_result(path, {"settings": (1, 3)}, compute)[0]["value"] == 3


def test_result_key_follows_the_statistics_source(tmp_path, monkeypatch):
    from phasekv.reproduce import cache

    stats = tmp_path / "stats"
    stats.mkdir()
    (stats / "verdict.py").write_text("RULE = 1\n")
    monkeypatch.setattr(cache, "PHASEKV_SOURCE", tmp_path)
    cache.source_hash.cache_clear()
    first = result_key("probe", {"study": {"n": 1}}, None)
    (stats / "verdict.py").write_text("RULE = 2\n")
    cache.source_hash.cache_clear()
    assert result_key("probe", {"study": {"n": 1}}, None) != first  # a changed rule: stored verdicts are stale
    (stats / "verdict.py").write_text("RULE = 1\n")
    cache.source_hash.cache_clear()
    assert result_key("probe", {"study": {"n": 1}}, None) == first
    cache.source_hash.cache_clear()


def test_result_key_follows_the_checkpoints_model_files_not_its_path(tmp_path, monkeypatch):
    first = tmp_path / "a" / "step_000004"
    first.mkdir(parents=True)
    for name, data in (("config.json", b"{}"), ("model.safetensors", b"weights"), ("trainer.pt", b"adam")):
        (first / name).write_bytes(data)
    key = result_key("knockout", {"study": KnockoutOptions()}, first)
    assert key["options"]["study"]["calibration_mappings"] == 16 and key["checkpoint"]["model.safetensors"]
    copy = tmp_path / "b" / "step_000004"
    copy.parent.mkdir()
    copy.mkdir()
    for p in first.iterdir():
        (copy / p.name).write_bytes(p.read_bytes())
    assert result_key("knockout", {"study": KnockoutOptions()}, copy) == key  # the contents, not the path
    (copy / "trainer.pt").write_bytes(b"adam, one step on")
    assert result_key("knockout", {"study": KnockoutOptions()}, copy) == key  # optimiser state: not the answers
    (copy / "model.safetensors").write_bytes(b"other weights")
    assert result_key("knockout", {"study": KnockoutOptions()}, copy) != key
    assert result_key("knockout", {"study": KnockoutOptions(calibration_mappings=8)}, first) != key
    assert result_key("cycle", {"study": KnockoutOptions()}, first) != key
    monkeypatch.setattr("phasekv.reproduce.cache.__version__", "0.0.0-other")
    assert result_key("knockout", {"study": KnockoutOptions()}, first) != key


def test_a_stage_names_a_known_study_and_run_selection(tmp_path):
    with pytest.raises(ValueError, match="unknown run selection"):
        Stage("knockout", KnockoutOptions(), runs="some")
    with pytest.raises(ValueError, match="unknown study 'knockouts'"):
        run_stage(_mini_profile(), tmp_path, Stage("knockouts", KnockoutOptions()))
    twice = replace(_mini_profile(), analyses=(TINY_ANALYSES[0], TINY_ANALYSES[0]))
    with pytest.raises(ValueError, match="each study once"):
        run_stages(twice, tmp_path)


def test_logged_training_seconds_adds_the_segments_of_a_resumed_run(tmp_path):
    rows = [
        {"step": 25, "elapsed_s": 10.0},
        {"step": 50, "elapsed_s": 20.0},
        {"step": 50, "val_loss": 1.0},  # no time: skipped
        {"step": 75, "elapsed_s": 12.0},  # resumed at step 50: a new process, its clock restarts
        {"step": 100, "elapsed_s": 24.5},
    ]
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert logged_training_seconds(tmp_path) == pytest.approx(44.5)
    assert logged_training_seconds(tmp_path / "missing") is None


def test_flip_query_is_an_unpadded_lookup_prompt_with_the_answer_first():
    tokenizer = build_word_tokenizer()
    lookup = get_profile("quick").lookup
    context, candidates = flip_query(tokenizer, lookup)
    words = context.split()
    assert "<pad>" not in words and words[-2] == ";"
    target = words[-1]
    records = [words[i : i + 3] for i in range(0, 3 * lookup.n_records, 3)]
    names = [r[1] for r in records]
    k = [r[0] for r in records].index(target)
    assert k == lookup.n_records // 2
    assert candidates == (" " + names[k], " " + names[k - 1], " " + names[k + 1])


def test_detect_period_finds_the_period_of_a_planted_pattern_and_not_its_multiple_or_divisor():
    lengths = np.arange(32)
    truth = (lengths % 8 >= 5).astype(int)  # candidate 1 on top at phases 5-7 of period 8
    winners = np.stack([truth, truth])
    found = detect_period(winners, lengths, range(2, 17), 2, n_permutations=200, seed=0)
    assert found["detected"] == 8
    noise = np.random.default_rng(0).integers(0, 2, size=(2, 32))
    assert detect_period(noise, lengths, range(2, 17), 2, n_permutations=200, seed=0)["detected"] is None
