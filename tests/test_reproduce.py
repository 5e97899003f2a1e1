import json
from dataclasses import replace

import pytest
import torch

from phasekv.evaluate.learned import learned
from phasekv.model import PhaseKVModel
from phasekv.reproduce import PROFILES, Profile, RunSpec, get_profile, reproduce
from phasekv.reproduce.plan import write_plan
from phasekv.train import RunConfig, train


def test_every_paper_run_builds_at_paper_size_and_trains_one_step_down_scaled(tmp_path):
    paper = get_profile("paper")
    assert {r.preset for r in paper.runs} >= {"full-1kv", "full-8kv", "w8s8-1kv", "w8s4-1kv", "w12s12-4kv", "dsv4"}
    assert sorted(r.seed for r in paper.runs if r.preset == "w8s8-1kv") == [42, 43, 44, 45]
    for run in paper.runs:
        config = paper.run_config(run)
        with torch.device("meta"):
            model = PhaseKVModel(config.model_config(151_936))
        assert model.num_parameters() > 5e8
        if run.seed != 42:
            continue  # one down-scaled step per architecture
        small = replace(
            config,
            model=replace(config.model, size="tiny"),
            steps=1,
            batch_size=2,
            seq_len=320,
            checkpoint_every=1,
            val_every=1,
            val_batches=1,
            log_every=1,
            gate_steps=(),
        )
        result = train(RunConfig.from_dict(small.to_dict()), tmp_path / run.name, progress=False)
        assert result.step == 1 and torch.isfinite(torch.tensor(result.metrics["loss"]))


def test_plan_writes_configs_and_torchrun_commands(tmp_path):
    text = write_plan(get_profile("paper"), tmp_path)
    assert text.count("torchrun --nnodes 1 --nproc_per_node 8 -m phasekv.train --config") == len(PROFILES["paper"].runs)
    assert (tmp_path / "configs" / "w8s8-1kv-s45" / "run.json").is_file()


@pytest.mark.slow
def test_reproduce_end_to_end_on_a_miniature_profile(tmp_path):
    quick = get_profile("quick")
    mini = Profile(
        name="mini",
        description="test",
        size="tiny",
        runs=(
            RunSpec("full-1kv", "full-1kv", "Full attention · 1 KV", steps=4),
            RunSpec("w8s8-1kv", "w8s8-1kv", "W8/S8 · 1 KV", steps=4),
        ),
        mixture=quick.mixture,
        optim=replace(quick.optim, warmup_steps=1),
        model_overrides=quick.model_overrides,
        lookup=replace(quick.lookup, n_mappings=4, modulus=16, n_records=8, n_demos=2),
        batch_size=2,
        seq_len=128,
    )
    summary = reproduce(mini, tmp_path, progress=False)
    assert {row["run"] for row in summary["rows"]} == {"full-1kv", "w8s8-1kv"}
    assert not any(row["learned"] for row in summary["rows"])  # 4 steps: at chance, and labelled so
    assert "not learned (chance)" in (tmp_path / "table.md").read_text()
    assert (tmp_path / "report_figures" / "residues.png").stat().st_size > 10_000
    assert "not learned (chance)" in (tmp_path / "report.html").read_text()
    result = json.loads((tmp_path / "results" / "w8s8-1kv.json").read_text())
    assert result["controls"] and result["stride"]["value"] == 8 and not learned(result)
    again = reproduce(mini, tmp_path, progress=False)  # reuses checkpoints and results
    assert again["train_seconds"] == {} and again["rows"] == summary["rows"]
