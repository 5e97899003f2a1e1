import json
import platform
from dataclasses import replace

import pytest
import torch

from phasekv import provenance
from phasekv.model import PhaseKVModel
from phasekv.reproduce import PROFILES, Profile, RunSpec, get_profile, reproduce
from phasekv.reproduce.training_plan import write_plan
from phasekv.studies.designs import run as designs_module
from phasekv.studies.probe.result import learned
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
            data=replace(config.data, kind="mixture", tokens_dir=None, text_fraction=0.0),  # no text here
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
            RunSpec("dsv4-csa", "dsv4-csa", "DeepSeek-V4 CSA", steps=4),
        ),
        mixture=quick.mixture,
        optim=replace(quick.optim, warmup_steps=1),
        model_overrides=quick.model_overrides,
        lookup=replace(quick.lookup, n_mappings=4, modulus=16, n_records=8, n_demos=2),
        batch_size=2,
        seq_len=128,
    )
    summary = reproduce(mini, tmp_path, progress=False)
    # a model with a lightning indexer is also probed reading every entry (same weights, top-k off)
    assert {row["run"] for row in summary["rows"]} == {"full-1kv", "w8s8-1kv", "dsv4-csa", "dsv4-csa-every-entry"}
    sparse, dense = (
        json.loads((tmp_path / "results" / f"{n}.json").read_text()) for n in ("dsv4-csa", "dsv4-csa-every-entry")
    )
    assert sparse["topk_hits"] and "topk_hits" not in dense and "every visible entry" in dense["counterfactual"]
    assert dense["label"] == "DeepSeek-V4 CSA · every entry read" and dense["checkpoint"] == sparse["checkpoint"]
    assert not any(row["learned"] for row in summary["rows"])  # 4 steps: at chance, and labelled so
    document = (tmp_path / f"{mini.name}.md").read_text()
    assert "not learned (chance)" in document and summary["table"] in document
    for written in (
        f"commit {provenance.code_commit()['commit'][:12]}",
        f"Python {platform.python_version()}",
        f"torch {torch.__version__}",
        provenance.machine_description()["cpu"],
        "wall time**: train ",
    ):
        assert written in document, written
    assert f"![accuracy by residue]({mini.name}-residues.png)" in document
    figure = (tmp_path / "report_figures" / "residues.png").read_bytes()
    assert len(figure) > 10_000 and (tmp_path / f"{mini.name}-residues.png").read_bytes() == figure
    assert "not shown above guessing" in (tmp_path / "report.html").read_text()
    result = json.loads((tmp_path / "results" / "w8s8-1kv.json").read_text())
    assert result["controls"] and result["stride"]["value"] == 8 and not learned(result)
    again = reproduce(mini, tmp_path, progress=False)  # reuses checkpoints and results
    assert again["train_seconds"] == {} and again["rows"] == summary["rows"]


def _mini(name: str, runs: tuple[RunSpec, ...], **kw) -> Profile:
    """The quick profile at miniature size, without its post-training analyses (tested in test_reproduce_stages)."""
    quick = get_profile("quick")
    return replace(
        quick,
        name=name,
        runs=runs,
        optim=replace(quick.optim, warmup_steps=1),
        lookup=replace(quick.lookup, n_mappings=4, modulus=16, n_records=8, n_demos=2),
        batch_size=2,
        seq_len=128,
        **{"analyses": (), **kw},
    )


def test_a_profile_with_the_grid_shift_moves_the_grid_of_every_compressed_run_and_keys_its_cache_on_it(tmp_path):
    runs = (
        RunSpec("full-1kv", "full-1kv", "Full attention · 1 KV", steps=2),
        RunSpec("w8s8-1kv", "w8s8-1kv", "W8/S8 · 1 KV", steps=2),
    )
    plain = reproduce(_mini("plain", runs), tmp_path, progress=False)
    assert "grid shift" not in plain["table"]
    shifted = reproduce(_mini("shifted", runs, grid_shift=True), tmp_path, progress=False)
    assert shifted["train_seconds"] == {}  # the same runs: trained once
    compressed, full = (json.loads((tmp_path / "results" / f"{n}.json").read_text()) for n in ("w8s8-1kv", "full-1kv"))
    test = compressed["phase_test"]["grid_shift"]
    assert test["period"] == 8 and test["offsets"] == list(range(8)) and len(test["by_grid"]) == 8
    assert compressed["phase_test"]["basis"].startswith("grid shift (the pattern")
    assert compressed["phase_test"]["position_design"]["period"] == 8
    assert full["phase_test"]["grid_shift"] is None  # full attention has no grid to move
    row = next(line for line in shifted["table"].splitlines() if line.startswith("| W8/S8"))
    assert (
        "grid shift p " in row
        and "position design: " in row
        and "grid shift"
        not in next(line for line in shifted["table"].splitlines() if line.startswith("| Full attention"))
    )
    again = reproduce(_mini("shifted", runs, grid_shift=True), tmp_path, progress=False)
    assert again["rows"] == shifted["rows"]  # reused, not scored again
    assert json.loads((tmp_path / "results" / "w8s8-1kv.json").read_text()) == compressed


@pytest.mark.slow
def test_design_comparison_reuses_identical_runs_and_knocks_out_the_best_design(tmp_path, monkeypatch):
    control = RunSpec("full-1kv", "full-1kv", "Full attention · 1 KV", steps=3)
    baseline = RunSpec("w8s8-1kv-s42", "w8s8-1kv", "W8/S8 · 1 KV · seed 42", steps=3, design="W8/S8 · 1 KV")
    reproduce(_mini("quick", (control, baseline)), tmp_path / "quick", progress=False)
    designs = (
        RunSpec("w8s8-1kv-stagger-s42", "w8s8-1kv-stagger", "stagger · seed 42", steps=3, design="stagger"),
        RunSpec(
            "w8s8-1kv-reg-s42",
            "w8s8-1kv",
            "regulariser · seed 42",
            steps=3,
            design="regulariser",
            training={"static_concentration_weight": 0.5},
        ),
        RunSpec("w9s8-1kv-s42", "w9s8-1kv", "W9/S8 · seed 42", steps=3, design="W9/S8"),
    )
    changed = replace(baseline, steps=4)  # not identical to the finished run: trained again
    # 3 steps learn nothing, so no design qualifies for the knockout: pretend the first candidate does
    monkeypatch.setattr(designs_module, "best_design", lambda table: next(d for d in table if d["design"] == "stagger"))
    monkeypatch.setattr(designs_module, "best_seed", lambda design: design["runs"][0])
    mitigations = _mini("mit", (control, changed, *designs), reuse_from=("quick",), compare_designs=True)
    plan = write_plan(mitigations, tmp_path / "mit").splitlines()  # the estimate leaves out what is reused
    assert "1 of 5 runs finished or reused" in plan[4]
    assert next(line for line in plan if line.startswith("full-1kv ")).endswith(f"(reused from {tmp_path / 'quick'})")
    assert not next(line for line in plan if line.startswith("w8s8-1kv-s42 ")).endswith(")")  # 4 steps, not 3
    summary = reproduce(mitigations, tmp_path / "mit", progress=False)
    assert set(summary["train_seconds"]) == {changed.name, *(d.name for d in designs)}  # control copied
    regularised = json.loads((tmp_path / "mit" / "configs" / "w8s8-1kv-reg-s42" / "run.json").read_text())
    assert regularised["static_concentration_weight"] == 0.5
    table = {d["design"]: d for d in json.loads((tmp_path / "mit" / "designs.json").read_text())["designs"]}
    assert table["Full attention · 1 KV"]["control"] and table["W8/S8 · 1 KV"]["baseline"]
    assert table["stagger"]["cache_bytes_per_token"] == table["W8/S8 · 1 KV"]["cache_bytes_per_token"]
    assert table["stagger"]["meets_target"] is False and table["stagger"]["misses"]  # 3 steps: nothing learned
    assert len(table["stagger"]["key_gate_static"]) == 2  # one effective number per layer
    best = json.loads((tmp_path / "mit" / "designs.json").read_text())["knockout_run"]
    assert best == "w8s8-1kv-stagger-s42"
    assert (tmp_path / "mit" / "analysis" / f"knockout-{best}.json").is_file()
    cycled = json.loads((tmp_path / "mit" / "analysis" / f"cycle-{best}.json").read_text())  # W = S: cyclable
    assert cycled["run"] == best and json.loads((tmp_path / "mit" / "designs.json").read_text())["cycle_run"] == best
    assert "| stagger | 42 |" in (tmp_path / "mit" / "designs.md").read_text()
    # every seed of every row names the command that re-measures it, and the run table does too
    stagger = tmp_path / "mit" / "results" / "w8s8-1kv-stagger-s42.json"
    assert (
        f"- stagger, seed 42: `phasekv eval lookup --like {stagger}`" in (tmp_path / "mit" / "designs.md").read_text()
    )
    assert f"`phasekv eval lookup --like {stagger}`" in (tmp_path / "mit" / "mit.md").read_text()
    report = (tmp_path / "mit" / "report.html").read_text()
    assert 'id="designs-table"' in report and "not learned (chance)" in report
    assert (tmp_path / "mit" / "report_figures" / "designs.png").stat().st_size > 10_000
    assert "The gate cycling section shows w8s8-1kv-stagger-s42" in report
    # a W9/S8 best design: knocked out, not cycled (offsets are not phases); the best W = S candidate is cycled
    # instead (no seed learned in 3 steps: pretend they did), and the report says so
    monkeypatch.setattr(designs_module, "best_design", lambda table: next(d for d in table if d["design"] == "W9/S8"))
    monkeypatch.setattr(
        designs_module,
        "best_of",
        lambda table, usable: next(d for d in table if all(map(usable, d["runs"])) and d["design"] == "regulariser"),
    )
    reproduce(mitigations, tmp_path / "mit", progress=False)
    written = json.loads((tmp_path / "mit" / "designs.json").read_text())
    assert written["knockout_run"] == "w9s8-1kv-s42" and written["cycle_run"] == "w8s8-1kv-reg-s42"
    assert "W = S" in written["cycle_note"] and not (tmp_path / "mit" / "analysis" / "cycle-w9s8-1kv-s42.json").exists()
    assert (tmp_path / "mit" / "analysis" / "cycle-w8s8-1kv-reg-s42.json").is_file()
    page = (tmp_path / "mit" / "report.html").read_text()
    assert "no gate cycling for w9s8-1kv-s42" in page and "cycled instead: w8s8-1kv-reg-s42" in page


def test_best_seed_and_best_of_rank_learned_seeds_only():
    def row(name, gap, mean, learned, runs):
        return {"design": name, "gap": gap, "mean": mean, "learned": learned, "runs": runs, "control": False,
                "baseline": False}  # fmt: skip

    flat_at_chance = row("a", [0.0, 90.0], [3.0, 60.0], [False, True], ["a1", "a2"])
    steady = row("b", [50.0, 60.0], [70.0, 80.0], [True, True], ["b1", "b2"])
    assert designs_module.best_seed(steady) == "b2" and designs_module.best_seed(flat_at_chance) == "a2"
    assert (
        designs_module.best_of([flat_at_chance, steady], lambda run: True)["design"] == "b"
    )  # 90 > 55: seed 1 unlearned
    assert designs_module.best_of([flat_at_chance, steady], lambda run: run.startswith("a"))["design"] == "a"
    assert designs_module.best_of([row("c", [0.0], [2.0], [False], ["c1"])], lambda run: True) is None
    with pytest.raises(ValueError, match="no learned seed"):
        designs_module.best_seed(row("c", [0.0], [2.0], [False], ["c1"]))


def test_cycle_target_is_the_knocked_out_run_or_the_best_cyclable_candidate_with_a_note():
    def row(name, gap, mean, runs):
        return {"design": name, "gap": gap, "mean": mean, "learned": [True] * len(gap), "runs": runs,
                "control": False, "baseline": False}  # fmt: skip

    table = [row("W9", [10.0], [50.0], ["w9-s42"]), row("reg", [80.0, 60.0], [70.0, 40.0], ["r-s42", "r-s43"])]

    def problem(run):
        return "needs W = S" if run.startswith("w9") else None

    assert designs_module.cycle_target(table, "r-s43", problem) == ("r-s43", None)
    run, note = designs_module.cycle_target(table, "w9-s42", problem)
    assert run == "r-s42" and note.startswith("no gate cycling for w9-s42: needs W = S; cycled instead: r-s42")
    run, note = designs_module.cycle_target(table[:1], "w9-s42", problem)
    assert run is None and note.endswith("no learned W = S candidate to cycle instead")


def test_best_design_is_the_learned_candidate_with_the_smallest_gap():
    def row(name, gap, mean, learned=True, **role):
        return {
            "design": name,
            "gap": gap,
            "mean": mean,
            "learned": [learned] * len(gap),
            "control": False,
            "baseline": False,
            **role,
        }

    table = [
        row("full", [0.0], [100.0], control=True),
        row("w8s8", [95.0, 99.0], [44.0, 38.0], baseline=True),
        row("chance", [0.0, 6.0], [0.0, 5.0], learned=False),
        row("a", [80.0, 100.0], [21.0, 73.0]),
        row("b", [97.0, 97.0], [56.0, 69.0]),
    ]
    assert designs_module.best_design(table)["design"] == "a"
    assert designs_module.best_design(table[:3]) is None


def test_cache_bytes_per_token_counts_one_entry_per_stride():
    from phasekv.model.presets import preset_config
    from phasekv.studies.designs.run import cache_bytes_per_token

    full, w8s8 = preset_config("full-1kv"), preset_config("w8s8-1kv")
    assert cache_bytes_per_token(full) == 2 * 2 * 32 * 4  # layers x (K, V) x head_dim x float32
    assert cache_bytes_per_token(w8s8) == cache_bytes_per_token(full) / 8
    for same in ("w16s8-1kv", "w8s8-1kv-stagger", "w8s8-1kv-shift", "w9s8-1kv", "w10s8-1kv", "w9s8-1kv-vector"):
        assert cache_bytes_per_token(preset_config(same)) == cache_bytes_per_token(w8s8)
    assert cache_bytes_per_token(preset_config("w8s4-1kv")) == 2 * cache_bytes_per_token(w8s8)
    assert cache_bytes_per_token(preset_config("dsv4-mix")) == 0 + (32 + 16) * 4 / 4 + 32 * 4 / 16  # sliding, CSA, HCA


def test_third_round_lists_four_seeds_per_design_at_the_cpu_recipe_and_plans_the_cpu_runs_as_reused(tmp_path):
    from phasekv.model.io import CONFIG_FILE, WEIGHTS_FILE
    from phasekv.model.presets import preset_config
    from phasekv.reproduce.profiles import get_profile
    from phasekv.studies.designs.run import cache_bytes_per_token
    from phasekv.train.checkpoint import TRAINER_FILE
    from phasekv.train.config import save_run_config

    profile, cpu = get_profile("designs3"), get_profile("cpu")
    by_design: dict[str, list[int]] = {}
    for run in profile.runs:
        by_design.setdefault(run.design_name, []).append(run.seed)
    assert by_design == {
        design: [42, 43, 44, 45]
        for design in (
            "Full attention · 1 KV",
            "W8/S8 · 1 KV",
            "W8/S8 · offset-shared compressor",
            "W9/S8 · offset-shared compressor",
            "W8/S8 · non-competitive sigmoid gates",
            "W9/S8 · tied overlap gate",
        )
    }
    assert [r.seed for r in profile.runs] == sorted(r.seed for r in profile.runs)  # an interruption keeps seed 42
    cpu_runs = {r.name: r for r in cpu.runs}
    for run in profile.runs:  # the recipe of the matched CPU profile: its data, optimiser and steps
        config, reference = profile.run_config(run).to_dict(), cpu.run_config(cpu.runs[4]).to_dict()
        assert {k: config[k] for k in ("data", "optim", "steps", "batch_size", "seq_len")} == {
            k: reference[k] for k in ("data", "optim", "steps", "batch_size", "seq_len")
        }
        if run.design_name in ("Full attention · 1 KV", "W8/S8 · 1 KV"):  # the CPU profile's own runs: reusable
            assert profile.run_config(run) == cpu.run_config(cpu_runs[run.name])
        elif not run.is_control:
            assert cache_bytes_per_token(preset_config(run.preset)) == 64.0  # W8/S8 · 1 KV's, float32
    assert {t[0] for t in profile.seed_comparisons} == set(by_design) - {"Full attention · 1 KV", "W8/S8 · 1 KV"}
    # a finished CPU run with the same config is planned as reused and left out of the estimate
    done = tmp_path / "cpu" / "runs" / "w8s8-1kv-s42"
    save_run_config(cpu.run_config(cpu_runs["w8s8-1kv-s42"]), done)
    final = done / "checkpoints" / "step_002600"
    final.mkdir(parents=True)
    for name in (CONFIG_FILE, WEIGHTS_FILE, TRAINER_FILE):
        (final / name).write_text("")
    plan = write_plan(profile, tmp_path / "designs3").splitlines()
    assert "1 of 24 runs finished or reused" in plan[4]
    assert next(line for line in plan if line.startswith("w8s8-1kv-s42 ")).endswith(f"(reused from {tmp_path / 'cpu'})")
    assert not next(line for line in plan if line.startswith("w8s8-1kv-s43 ")).endswith(")")


def test_a_third_round_result_reads_its_overlap_gates_and_renders_in_the_report(tmp_path):
    """designs3's comparison from fabricated per-run rows and final gate snapshots (no training), as
    `compare_designs` writes it, through the designs table and the report's designs section."""
    from phasekv.model.presets import preset_config
    from phasekv.report import load_results
    from phasekv.results.record import write_results
    from phasekv.studies.designs import figure as designs_figure

    profile = get_profile("designs3")
    means = {"W8/S8 · 1 KV": 70.0, "Full attention · 1 KV": 100.0, "W9/S8 · tied overlap gate": 75.0}
    rows, configs = {}, {}
    for run in profile.runs:
        config = preset_config(run.preset, profile.size, **profile.model_overrides)
        configs[run.name] = config
        mean = means.get(run.design_name, 40.0)
        gap = 0.0 if run.is_control else 100.0 - mean
        rows[run.name] = {
            "val_loss": 1.0, "mean": mean, "worst": mean - gap / 2, "gap": gap, "gap_ci": [gap, gap],
            "period_diff": 0.0, "learned": run.seed != 45 or not run.design_name.startswith("W8/S8 · offset"),
        }  # fmt: skip
        comp = config.compression
        if comp is not None and comp.window > comp.stride:  # W9/S8: slot 8 gets 0.02 of the weight
            share = [0.98 / 8] * 8 + [0.02]
            layer = {"key": {"static_effective": [8.0], "per_window_effective": [4.0], "mean_by_offset": [share]}}
            snapshot = {"window": comp.window, "stride": comp.stride, "layers": [{"layer": i, **layer} for i in (0, 1)]}
            path = tmp_path / "runs" / run.name / "gates" / f"step_{run.steps:06d}.json"
            path.parent.mkdir(parents=True)
            path.write_text(json.dumps(snapshot))
    table = {d["design"]: d for d in designs_module.design_rows(profile, rows, configs, tmp_path)}
    tied, shared = table["W9/S8 · tied overlap gate"], table["W8/S8 · offset-shared compressor"]
    assert tied["key_gate_overlap"] == pytest.approx([0.02, 0.02]) and shared["key_gate_overlap"] is None
    assert (
        tied["cache_bytes_per_token"]
        == shared["cache_bytes_per_token"]
        == table["W8/S8 · 1 KV"]["cache_bytes_per_token"]
    )
    assert tied["misses"] == ["gap 25.0 > full attention's 0.0 + 5"] and not tied["meets_target"]
    assert shared["misses"][0].startswith("not learned")  # seed 45 at chance
    text = designs_module.markdown(list(table.values()))
    assert (
        "| W9/S8 · tied overlap gate | 42 / 43 / 44 / 45 | 64 |" in text and "| L0 0.020; L1 0.020 | missed |" in text
    )
    designs_module.write_designs(list(table.values()), tmp_path, {"knockout_run": None, "tests": []})
    write_results(json.loads((tmp_path / "designs.json").read_text()), tmp_path / "report-in" / "designs.json")
    page = designs_figure.section_html(designs_figure.section(load_results(tmp_path / "report-in")))
    assert "W9/S8 · tied overlap gate" in page and "No candidate design met the target (4 tried)." in page


def test_fourth_round_stages_kv_head_grids_beside_the_same_kv_heads_at_the_cpu_recipe(tmp_path):
    from phasekv.model.presets import preset_config
    from phasekv.studies.designs.run import cache_bytes_per_token

    round4, cpu = get_profile("round4"), get_profile("cpu")
    by_design: dict[str, list[int]] = {}
    for run in round4.runs:
        by_design.setdefault(run.design_name, []).append(run.seed)
    assert set(by_design) == {
        f"{kind} · {kv} KV{suffix}"
        for kv in (4, 8)
        for kind, suffix in (("Full attention", ""), ("W8/S8", ""), ("W8/S8", " · grids staggered across KV heads"))
    }
    assert all(seeds == [42, 43, 44, 45] for seeds in by_design.values())
    assert [r.seed for r in round4.runs] == sorted(r.seed for r in round4.runs) and round4.jobs == 1
    assert round4.grid_shift and round4.analyses == ()
    reference = cpu.run_config(cpu.runs[4]).to_dict()
    recipe = ("data", "optim", "steps", "batch_size", "seq_len", "checkpoint_every")
    bytes_per_token = {}
    for run in round4.runs:
        config = round4.run_config(run)
        assert {k: config.to_dict()[k] for k in recipe} == {k: reference[k] for k in recipe}
        model = preset_config(config.model.preset, **config.model.overrides)
        kv = int(run.design_name.split(" · ")[1].split()[0])
        assert model.num_kv_heads == kv and model.num_heads == max(4, kv)
        assert (model.compression is not None and model.compression.stagger == "kv_head") == (
            "staggered" in run.name + run.design_name
        )
        bytes_per_token.setdefault((kv, run.is_control), set()).add(cache_bytes_per_token(model))
    # a staggered model's cache grows like the unstaggered one's (measured in tests/core/test_head_stagger.py)
    assert bytes_per_token[(4, False)] == {256.0} and bytes_per_token[(8, False)] == {512.0}
    assert {t[0] for t in round4.seed_comparisons} >= {d for d in by_design if "staggered" in d}
    assert {t[4] for t in round4.seed_comparisons if len(t) == 5} == {"mean"}
    long = get_profile("round4-long")
    assert [(r.preset, r.seed, r.steps) for r in long.runs] == [
        (preset, seed, 3 * 2600) for seed in (42, 43) for preset in ("w8s8-1kv", "w9s8-1kv-offset-shared")
    ]
    assert long.run_config(long.runs[0]).checkpoint_every == 1950 and long.jobs == 1  # resumable every quarter
    plan = write_plan(long, tmp_path / "round4-long")
    assert "(1 one-thread processes)" in plan and "w9s8-1kv-offset-shared-long-s43 " in plan


def test_a_profiles_first_seeds_are_its_own_runs_and_say_so(tmp_path):
    """`--seeds 42` runs every design's first seed under the same names and configs as the whole profile (so the whole
    profile reuses them), with tests across seeds reported as not testable; an unknown seed is one line."""
    from typer.testing import CliRunner

    from phasekv.cli import app
    from phasekv.reproduce.across_seeds import comparisons, design_rows

    round4 = get_profile("round4")
    first = round4.only_seeds([42])
    assert [r.name for r in first.runs] == [r.name for r in round4.runs if r.seed == 42] and len(first.runs) == 6
    assert all(first.run_config(r) == round4.run_config(r) for r in first.runs)
    assert first.description.endswith("(here seeds 42 of 4 only)")
    rows = [{"run": r.name, "learned": True, "mean": 50.0, "gap": 10.0} for r in first.runs]
    table = design_rows(first, rows)
    assert all(row["seeds"] == [42] for row in table)
    assert {test["testable"] for test in comparisons(first, table)} == {False}
    with pytest.raises(ValueError, match=r"^--seeds 7: profile round4 trains seeds 42, 43, 44, 45$"):
        round4.only_seeds([7, 42])
    for seeds, message in (("4x", "--seeds takes integers separated by commas, got '4x'"), ("7", "--seeds 7:")):
        run = CliRunner().invoke(app, ["reproduce", "--profile", "round4", "--seeds", seeds, "--out", str(tmp_path)])
        assert run.exit_code != 0 and message in run.output and "Traceback" not in run.output, run.output
    assert list(tmp_path.iterdir()) == []  # refused before anything was written


def test_a_kv_head_staggered_run_trains_and_takes_the_grid_shift_test(tmp_path):
    runs = (
        RunSpec(
            "w8s8-4kv-head-stagger",
            "w8s8-4kv-head-stagger",
            "W8/S8 · 4 KV · grids staggered across KV heads",
            steps=2,
        ),
    )
    summary = reproduce(_mini("staggered", runs, grid_shift=True), tmp_path, progress=False)
    result = json.loads((tmp_path / "results" / "w8s8-4kv-head-stagger.json").read_text())
    assert result["phase_test"]["grid_shift"]["offsets"] == list(range(8))
    snapshot = json.loads((tmp_path / "runs" / "w8s8-4kv-head-stagger" / "gates" / "step_000002.json").read_text())
    assert len(snapshot["layers"][0]["key"]["static_effective"]) == 4  # one per KV head, joined from 4 calls
    assert "grid shift p " in next(line for line in summary["table"].splitlines() if line.startswith("| W8/S8"))


def test_second_round_designs_match_w8s8_cache_and_the_quick_recipe():
    from phasekv.model.presets import preset_config
    from phasekv.reproduce.profiles import DESIGN_SEEDS, get_profile
    from phasekv.studies.designs.run import cache_bytes_per_token

    profile = get_profile("designs")
    baseline = cache_bytes_per_token(preset_config("w8s8-1kv"))
    compressed = [r for r in profile.runs if not r.is_control]
    assert {r.steps for r in compressed} == {get_profile("quick").runs[1].steps}
    assert all(cache_bytes_per_token(preset_config(r.preset)) == baseline for r in compressed)
    for design in {r.design_name for r in compressed}:
        assert sorted(r.seed for r in compressed if r.design_name == design) == list(DESIGN_SEEDS)
    regularised = [r for r in compressed if r.training.get("concentration_windows") == "records"]
    assert len(regularised) == len(DESIGN_SEEDS)
    assert all(r.training["static_concentration_weight"] > 0 for r in regularised)
