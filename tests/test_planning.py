"""The long commands plan first: the planner's estimate and dry run, plans whose counts are what the runs then
compute, `--dry-run` on knockout, gates, cycle and theory (the plan, a projection, no file), and results written
to a default path when no `--out` is given."""

import io
import json
import math
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from analysis_helpers import SMALL, TOKENIZER, V, planted_model, random_model
from conftest import save_with_tokenizer, tiny_qwen3
from phasekv import planning
from phasekv.internals.probe_prompts import calibration_options, lookup_prompts, unique_ids
from phasekv.model import PhaseKVModel, preset_config
from phasekv.planning import DryRunDone, Planner, Stage, WorkPlan
from phasekv.scoring import HFScorer, PhaseKVScorer, load_scorer
from phasekv.studies.cycle.run import run_cycle
from phasekv.studies.gates.run import run_gates
from phasekv.studies.knockout import run as knockout_run
from phasekv.studies.knockout.options import KnockoutOptions
from phasekv.studies.knockout.run import run_knockout
from phasekv.tasks.lookup import LookupOptions
from phasekv.theory.sweep import run_sweep
from phasekv.theory.theorem1 import Theorem1Config, run_theorem1
from phasekv.theory.theorem2 import GateTrainingConfig, train_gates
from phasekv.train.gates import gate_snapshot, write_snapshot

LOOKUP = LookupOptions(n_records=8, n_demos=2, modulus=8, n_mappings=2)
PLAN = WorkPlan("a test", (Stage("a", 3, "steps of a"), Stage("b", 2, "steps of b")), {"things": 7})
THEORY = ["--n-tokens", "16", "--n-chunks", "2", "--chunk-size", "3"]


@pytest.fixture
def clock(monkeypatch):
    """A clock that moves only when told: clock(seconds)."""
    now = [100.0]
    monkeypatch.setattr(planning.time, "perf_counter", lambda: now[0])

    def advance(seconds: float) -> None:
        now[0] += seconds

    return advance


def walk(planner: Planner, name: str, durations: list[float], clock) -> list[int]:
    """Walk stage `name` with steps of these durations; the steps the planner let through."""
    seen = []
    for index in planner.steps(name, range(len(durations))):
        clock(durations[index])
        seen.append(index)
    return seen


def test_the_estimate_is_the_time_so_far_plus_the_steps_left_at_each_stage_timed_rate(clock, capsys):
    planner = Planner()
    clock(5.0)  # loading before the plan counts in the total
    planner.start(PLAN)
    assert walk(planner, "a", [9.0, 2.0, 2.0], clock) == [0, 1, 2]  # the first step warms up, the second is timed
    assert planner.estimate_s is None  # b not timed yet
    assert walk(planner, "b", [7.0, 3.0], clock) == [0, 1]
    # at the estimate: 5 + 13 + 10 s elapsed, nothing left
    assert planner.estimate_s == pytest.approx(28.0) and planner.step_s == {"a": 2.0, "b": 3.0}
    planner.close()
    err = capsys.readouterr().err
    assert "plan: a test\n      things 7\n      a: 3 steps of a\n      b: 2 steps of b" in err
    assert "estimated total time: about 28 s" in err and "a 2.00 s a step, b 3.00 s a step" in err


def test_a_dry_run_stops_each_stage_once_it_is_timed_and_projects_the_rest(clock):
    planner = Planner(dry_run=True)
    clock(1.0)
    planner.start(PLAN)
    assert walk(planner, "a", [4.0, 2.0, 2.0], clock) == [0, 1]  # cut after its timed step
    with pytest.raises(DryRunDone) as done:
        walk(planner, "b", [5.0, 3.0], clock)
    # 1 + 6 + 8 s so far, then a's last step at 2 s: b is done
    assert done.value.projected_s == pytest.approx(17.0) and planner.done == {"a": 2, "b": 2}
    assert "projected time: about 17 s" in done.value.describe() and "nothing written" in done.value.describe()
    one = WorkPlan("one step", (Stage("only", 1, "step"),))
    planner = Planner(dry_run=True)
    planner.start(one)
    with pytest.raises(DryRunDone):  # a stage of one step is timed on it
        with planner.step("only"):
            clock(2.0)


def test_a_quiet_planner_prints_nothing_and_a_nested_plan_keeps_the_outer_one(capsys):
    planner = Planner(quiet=True)
    planner.start(PLAN)
    planner.start(WorkPlan("inner", (Stage("c", 1, "step"),)))
    assert planner.plan is PLAN and list(planner.steps("a", range(3))) == [0, 1, 2]
    planner.close()
    assert capsys.readouterr().err == ""
    assert list(Planner().steps("a", range(2))) == [0, 1]  # a helper run outside any plan walks freely


def planned_and_done(run) -> Planner:
    """Run `run(planner)` with a quiet planner; every stage must have walked exactly its planned steps."""
    planner = Planner(quiet=True)
    run(planner)
    assert planner.done == {stage.name: stage.steps for stage in planner.plan.stages}, planner.plan.describe()
    return planner


def test_the_knockout_plan_counts_its_calibration_and_knockout_batches():
    planted = PhaseKVScorer(planted_model(), TOKENIZER, batch_size=4)
    options = KnockoutOptions(calibration_mappings=2, batch_size=16)
    heads = planned_and_done(lambda p: run_knockout(planted, LOOKUP, options, p))
    assert heads.plan.counts["KV heads"] == 2 and heads.plan.stage("knockout").steps > 1
    hf = HFScorer(tiny_qwen3(V), TOKENIZER, batch_size=16)
    options = KnockoutOptions(mode="layers", calibration_mappings=2, batch_size=16)
    layers = planned_and_done(lambda p: run_knockout(hf, LOOKUP, options, p)).plan
    batches = -(-layers.counts["distinct"] // 16)
    assert layers.counts["layers"] == 2 and layers.stage("knockout").steps == batches * (1 + 2)


def test_a_layers_knockout_dry_run_times_single_forward_passes(monkeypatch):
    # On a large model one batch is 1 + layers full passes (SmolLM2: 31, about 5 minutes on a CPU core): the dry run
    # must stop after two passes, not two batches.
    hf = HFScorer(tiny_qwen3(V), TOKENIZER, batch_size=16)
    calls = []
    real = knockout_run.knocked_final_logits
    monkeypatch.setattr(knockout_run, "knocked_final_logits", lambda *a: calls.append(a[3]) or real(*a))
    options = KnockoutOptions(mode="layers", calibration_mappings=2, batch_size=16)
    with pytest.raises(DryRunDone) as done:
        run_knockout(hf, LOOKUP, options, Planner(dry_run=True, file=io.StringIO()))
    assert calls == [None, 0] and "knockout" in done.value.rates


def test_the_gates_plan_adds_the_top_k_pass_of_models_with_an_indexer():
    planted = PhaseKVScorer(planted_model(), TOKENIZER, batch_size=8)
    assert [s.name for s in planned_and_done(lambda p: run_gates(planted, LOOKUP, 8, p)).plan.stages] == [
        "gate metrics"
    ]
    dsv4 = PhaseKVScorer(PhaseKVModel(preset_config("dsv4-mix", vocab_size=V)).eval(), TOKENIZER, batch_size=8)
    assert [s.name for s in planned_and_done(lambda p: run_gates(dsv4, LOOKUP, 8, p)).plan.stages] == [
        "gate metrics",
        "top-k hits",
    ]


def test_the_cycle_plan_counts_every_shift_scoring_and_gate_shares():
    planted = PhaseKVScorer(planted_model(), TOKENIZER, batch_size=8)
    cycle = planned_and_done(lambda p: run_cycle(planted, [-1, 1], LOOKUP, 20, p))
    assert cycle.plan.counts["shifts"] == "0, -1, 1"


def test_the_theory_plans_count_their_steps_and_evaluations():
    small = dict(n_tokens=16, n_chunks=2, chunk_size=3, n_heads=2)
    planned_and_done(lambda p: run_theorem1(Theorem1Config(**small, n_starts=2, steps=5), p))
    planned_and_done(lambda p: train_gates(GateTrainingConfig(**small, steps=7, record_every=3, batch_size=4), p))
    sweep = planned_and_done(
        lambda p: run_sweep(GateTrainingConfig(**small, steps=3, batch_size=4), {"n_heads": [1, 2]}, [0, 1], p)
    )
    assert sweep.plan.counts == {"grid points": 2, "seeds": 2, "runs": 4}


@pytest.fixture(scope="module")
def app():
    from phasekv.cli import app  # the `phasekv` command itself, with every subcommand mounted

    return app


def files_under(root: Path) -> set[Path]:
    return {path for path in root.rglob("*")}


def invoke(app, args: list[str]):
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.output


def test_dry_runs_print_the_plan_and_a_projection_and_write_nothing(app, tmp_path, monkeypatch):
    planted = save_with_tokenizer(planted_model(), tmp_path / "w8s8")
    monkeypatch.chdir(tmp_path)
    before = files_under(tmp_path)
    distinct = unique_ids(lookup_prompts(load_scorer(planted).tokenizer, LOOKUP).prompts)[0].shape[0]
    calibration = lookup_prompts(TOKENIZER, calibration_options(LOOKUP, 2)).prompts
    small = [*SMALL, "--batch-size", "4"]
    out = invoke(app, ["knockout", str(planted), "--calibration-mappings", "2", "--out", "k", *small, "--dry-run"])
    assert f"plan: knockout map (heads) of {planted}" in out and f"distinct {distinct}," in out
    assert f"calibration: {math.ceil(unique_ids(calibration)[0].shape[0] / 4)} forward passes" in out
    assert f"knockout: {math.ceil(distinct / 4)} batches of up to 4 prompts" in out
    assert "projected time: about" in out and "L1H0" not in out  # no table: nothing was computed
    out = invoke(app, ["gates", str(planted), *small, "--dry-run"])
    assert f"gate metrics: {math.ceil(distinct / 4)} forward passes" in out and "projected time" in out
    out = invoke(app, ["cycle", str(planted), "--delta", "-1,1", *small, "--dry-run"])
    assert "shifts 0, -1, 1" in out and "projected time" in out and "R^2" not in out
    out = invoke(app, ["theory", "theorem2", *THEORY, "--steps", "120", "--batch-size", "8", "--dry-run"])
    assert "evaluation: 5 passes over 512 evaluation contexts" in out  # steps 0, 50, 100, 120 and the final
    assert "training: 120 adam steps on 8 contexts" in out and "projected time" in out
    out = invoke(app, ["theory", "theorem1", *THEORY, "--n-starts", "2", "--steps", "30", "--dry-run"])
    assert "optimisation: 30 Adam steps on 2 free coefficient rules" in out
    assert "assignments: 3 exact losses" in out  # 2 heads on the 2 non-final positions, up to order
    out = invoke(app, ["theory", "sweep", "--n-heads", "1,2", "--gamma", "4", "--beta", "4", "--dry-run"])
    assert "grid points 2, seeds 1, runs 2" in out and "training: 1200 adam steps" in out
    assert files_under(tmp_path) == before


def test_results_go_to_a_default_path_when_no_out_is_given(app, tmp_path, monkeypatch):
    planted = save_with_tokenizer(planted_model(), tmp_path / "w8s8")
    monkeypatch.chdir(tmp_path)
    out = invoke(app, ["knockout", str(planted), "--calibration-mappings", "2", *SMALL])
    assert "wrote analysis/knockout.json" in out
    assert json.loads((tmp_path / "analysis" / "knockout.json").read_text())["analysis"] == "knockout"
    out = invoke(app, ["theory", "theorem2", *THEORY, "--steps", "5", "--batch-size", "4"])
    assert "wrote theory/theorem2.json" in out and (tmp_path / "theory" / "theorem2.png").is_file()
    assert json.loads((tmp_path / "theory" / "theorem2.json").read_text())["params"]["steps"] == 5
    out = invoke(app, ["theory", "theorem1", *THEORY, "--n-starts", "2", "--steps", "5"])
    assert json.loads((tmp_path / "theory" / "theorem1.json").read_text())["params"]["n_starts"] == 2
    args = ["--n-tokens", "16", "--n-chunks", "2", "--chunk-size", "3", "--n-heads", "1", "--gamma", "2", "--beta", "2"]
    out = invoke(app, ["theory", "sweep", *args, "--steps", "3", "--batch-size", "4"])
    assert "wrote theory/sweep.json" in out
    assert len(json.loads((tmp_path / "theory" / "sweep.json").read_text())["runs"]) == 1
    assert not list(tmp_path.rglob("*.tmp"))  # written atomically: no temporary file left beside them


def test_a_gate_trajectory_plans_its_steps_and_its_dry_run_writes_nothing(app, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    for step in (1, 5, 9):
        model = random_model("w8s8-1kv", seed=step)
        write_snapshot(run_dir, gate_snapshot(model, model.config.compression, torch.randint(5, V, (2, 32)), step))
    monkeypatch.chdir(tmp_path)
    before = files_under(tmp_path)
    out = invoke(app, ["gates", str(run_dir), "--source", "snapshots", *SMALL, "--dry-run"])
    assert f"plan: gate trajectory of {run_dir}" in out and "snapshots: 3 snapshots" in out and "step 9" not in out
    assert files_under(tmp_path) == before
