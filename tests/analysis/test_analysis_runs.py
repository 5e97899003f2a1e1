"""The analysis runs and commands: knockout maps, gate metrics (phasekv and DeepSeek-V4 HF models),
gate trajectories, gate cycling, and `phasekv knockout | gates | cycle` through typer."""

import dataclasses
import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from analysis_helpers import SMALL, TOKENIZER, V, planted_model, random_model
from conftest import needs_dsv4, save_with_tokenizer, tiny_dsv4, tiny_qwen3
from phasekv.internals.hf_gates import collect_hf_gates, hf_gate_metrics
from phasekv.internals.models import HFView, PhaseKVView, view
from phasekv.internals.probe_prompts import calibration_options, check_disjoint, lookup_prompts, unique_ids
from phasekv.model import PhaseKVModel, preset_config
from phasekv.scoring import PhaseKVScorer
from phasekv.studies.cycle import figure as cycle_figure
from phasekv.studies.cycle.figure import plot_cycle
from phasekv.studies.cycle.options import parse_deltas
from phasekv.studies.cycle.run import cycle_statistics, fold_cells, run_cycle
from phasekv.studies.gates import figure as gates_figure
from phasekv.studies.gates.figure import plot_gates
from phasekv.studies.gates.run import run_gate_trajectory, run_gates
from phasekv.studies.knockout import figure as knockout_figure
from phasekv.studies.knockout import run as knockout_run
from phasekv.studies.knockout.ablation import final_position_means, knockout_logits_reference
from phasekv.studies.knockout.figure import plot_knockout
from phasekv.studies.knockout.layers import final_attention_means, knocked_final_logits
from phasekv.studies.knockout.options import KnockoutOptions
from phasekv.studies.knockout.run import run_knockout
from phasekv.tasks.lookup import LookupOptions
from phasekv.train.gates import gate_snapshot, write_snapshot

LOOKUP = LookupOptions(n_records=8, n_demos=2, modulus=8, n_mappings=2)
PNG = b"\x89PNG\r\n\x1a\n"


def spec_rows(spec: dict) -> list[dict]:
    """Every inline data row of a Vega-Lite spec: top-level values, or altair's named `datasets`."""
    rows = list(spec.get("data", {}).get("values", []))
    return rows + [row for named in spec.get("datasets", {}).values() for row in named]


def spec_marks(spec) -> set[str]:
    """The mark types anywhere in a Vega-Lite spec."""
    if isinstance(spec, list):
        return set().union(*map(spec_marks, spec)) if spec else set()
    if not isinstance(spec, dict):
        return set()
    found = {spec["mark"] if isinstance(spec["mark"], str) else spec["mark"]["type"]} if "mark" in spec else set()
    return found.union(*(spec_marks(v) for k, v in spec.items() if k != "mark"))


KNOCKOUT_KEYS = {
    "schema",
    "analysis",
    "mode",
    "model",
    "options",
    "knockout_options",
    "calibration",
    "seed",
    "n_prompts",
    "n_unique_prompts",
    "modulus",
    "stride",
    "clean",
    "targets",
    "software",
    "wall_time_s",
}
TARGET_KEYS = {
    "layer",
    "kv_head",
    "accuracy",
    "accuracy_by_residue",
    "accuracy_by_phase",
    "change_by_residue",
    "change_by_phase",
    "relative_change_by_residue",
    "relative_change_by_phase",
}


def _dsv4(hca_rate=8):
    rates = {"compressed_sparse_attention": 4, "heavily_compressed_attention": hca_rate}
    model = tiny_dsv4(V, compress_rates=rates)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("position_bias"):
                p.normal_(0, 1.0)
    return model


def test_knockout_run_writes_the_map_and_equals_a_manual_knockout(monkeypatch, tmp_path):
    model = random_model("w8s8-8kv")
    scorer = PhaseKVScorer(model, TOKENIZER, batch_size=64)

    def planted_prompts(tokenizer, options):
        """Even mappings are answered with the clean model's own top-1, so clean accuracy is 50%."""
        prompt_set = lookup_prompts(tokenizer, options)
        if options.split != "eval":
            return prompt_set
        ids, rows = unique_ids(prompt_set.prompts)
        with torch.no_grad():
            top = model(ids)[:, -1].argmax(-1)[rows]
        prompts = [
            dataclasses.replace(p, answer_ids=[int(top[i])]) if p.unit % 2 == 0 else p
            for i, p in enumerate(prompt_set.prompts)
        ]
        return dataclasses.replace(prompt_set, prompts=prompts)

    monkeypatch.setattr(knockout_run, "lookup_prompts", planted_prompts)
    options = KnockoutOptions(calibration_mappings=2, batch_size=64)
    result = run_knockout(scorer, LOOKUP, options, progress=False)
    assert KNOCKOUT_KEYS <= set(result) and result["schema"] == "phasekv.knockout/1"
    assert len(result["targets"]) == 2 * 8 and all(TARGET_KEYS == set(t) for t in result["targets"])
    assert result["clean"]["accuracy"] == pytest.approx(0.5) and result["stride"]["value"] == 8
    assert result["calibration"]["disjoint_from_eval"] and result["knockout_options"]["calibration_mappings"] == 2
    json.dumps(result)

    prompts = planted_prompts(TOKENIZER, LOOKUP).prompts
    cal_ids, _ = unique_ids(lookup_prompts(TOKENIZER, calibration_options(LOOKUP, 2)).prompts)
    means = final_position_means(model, [cal_ids])
    ids, rows = unique_ids(prompts)
    answers = torch.tensor([p.answer_ids[0] for p in prompts])
    residues = torch.tensor([p.residue for p in prompts])
    changed = 0
    for row in result["targets"]:
        top = knockout_logits_reference(model, ids, means, row["layer"], row["kv_head"]).argmax(-1)[rows]
        correct = top == answers
        expected = [correct[residues == r].float().mean().item() for r in range(LOOKUP.modulus)]
        assert row["accuracy_by_residue"] == pytest.approx(expected)
        changed += any(c != 0 for c in row["change_by_residue"])
    assert changed > 0
    spec = knockout_figure.spec(knockout_figure.map_block(result, "planted"))
    assert {"rect", "bar"} <= spec_marks(spec)
    rows = spec_rows(spec)
    for target in result["targets"]:
        label = f"L{target['layer']}H{target['kv_head']}"
        cells = sorted((r["position"], r["points"]) for r in rows if r["label"] == label and r["kind"] == "residue")
        assert [p for p, _ in cells] == list(range(LOOKUP.modulus))
        assert [v for _, v in cells] == pytest.approx([100 * c for c in target["change_by_residue"]], abs=0.006)
    clean = {r["position"]: r["clean"] for r in rows if r["kind"] == "residue"}
    assert [clean[i] for i in range(LOOKUP.modulus)] == pytest.approx(
        [100 * a for a in result["clean"]["accuracy_by_residue"]], abs=1e-4
    )
    assert plot_knockout(result, tmp_path / "k.png").read_bytes()[:8] == PNG


def test_calibration_prompts_never_overlap_the_evaluation_prompts():
    evaluation = lookup_prompts(TOKENIZER, LOOKUP).prompts
    calibration = lookup_prompts(TOKENIZER, calibration_options(LOOKUP, 4)).prompts
    check_disjoint(evaluation, calibration)
    assert not {tuple(p.input_ids) for p in evaluation} & {tuple(p.input_ids) for p in calibration}
    with pytest.raises(ValueError, match="disjoint"):
        check_disjoint(evaluation, calibration + evaluation[:1])


@pytest.mark.parametrize("kind", ["qwen3", pytest.param("dsv4", marks=needs_dsv4), "phasekv"])
def test_whole_layer_knockout_with_its_own_mean_is_the_identity(kind):
    model = {"qwen3": lambda: tiny_qwen3(V), "dsv4": _dsv4, "phasekv": lambda: random_model("w8s8-1kv")}[kind]()
    gen = torch.Generator().manual_seed(0)
    ids, other = torch.randint(5, V, (1, 24), generator=gen), torch.randint(5, V, (3, 24), generator=gen)
    own = final_attention_means(model, [ids], n_query=2)
    assert own.shape[:2] == (2, 2)
    clean = knocked_final_logits(model, ids, own, None)
    for layer in (0, 1):
        torch.testing.assert_close(knocked_final_logits(model, ids, own, layer), clean, rtol=1e-5, atol=1e-5)
    others = final_attention_means(model, [other], n_query=2)
    assert all((knocked_final_logits(model, ids, others, layer) - clean).abs().max() > 1e-4 for layer in (0, 1))


def test_gate_metrics_of_planted_gate_biases(tmp_path):
    result = run_gates(PhaseKVScorer(planted_model(key_offset=5, value_offset=6), TOKENIZER, batch_size=64), LOOKUP)
    rows = result["rows"]
    assert {(r["layer"], r["branch"]) for r in rows} == {(0, "key"), (0, "value"), (1, "key"), (1, "value")}
    for r in rows:
        assert int(np.argmax(r["phase_share"])) == 5  # value gates peak at 6, shown shifted back by one
        assert r["static_offsets"] < 1.2 and r["per_window_offsets"] <= r["static_offsets"] + 1e-6
    assert result["n_windows_from"]["prompts"] > 0 and result["schema"] == "phasekv.analysis.gates/1"
    spec = gates_figure.spec(gates_figure.plane_block(rows, "planted"))
    assert {"point", "line", "rect"} <= spec_marks(spec)
    drawn = spec_rows(spec)
    heads = {r["label"]: (r["x"], r["y"]) for r in drawn if r["kind"] == "head"}
    keys = [r for r in rows if r["branch"] == "key"]
    assert heads == {
        f"L{r['layer']}H{r['kv_head']}": (pytest.approx(r["static_offsets"], abs=6e-4),
                                          pytest.approx(r["per_window_offsets"], abs=6e-4))
        for r in keys
    }  # fmt: skip
    for r in rows:
        shares = [s for s in drawn if s["kind"] == "share" and s["branch"] == r["branch"]
                  and s["label"] == f"L{r['layer']}H{r['kv_head']}"]  # fmt: skip
        assert [s["share"] for s in sorted(shares, key=lambda s: s["phase"])] == pytest.approx(
            r["phase_share"], abs=6e-4
        )
    assert plot_gates(rows, tmp_path / "g.png").read_bytes()[:8] == PNG


@needs_dsv4
def test_deepseek_v4_gates_equal_the_compressor_formula():
    model = _dsv4()
    seen = {}
    for i, layer in enumerate(model.model.layers):
        layer.self_attn.compressor.register_forward_pre_hook(lambda _m, args, i=i: seen.__setitem__(i, args[0]))
    ids = torch.randint(5, V, (2, 21), generator=torch.Generator().manual_seed(1))
    gates = collect_hf_gates(model, [ids])
    csa = model.model.layers[0].self_attn.compressor
    hd, rate = csa.head_dim, csa.compress_rate
    with torch.no_grad():  # transformers' layout: slots 0..3 = previous block's first half, 4..7 = this block's second
        chunk = csa.gate_proj(seen[0][:, :20]).view(2, 5, rate, 2 * hd) + csa.position_bias
        logits = torch.full((2, 5, 2 * rate, hd), float("-inf"))
        logits[:, :, rate:] = chunk[..., hd:]
        logits[:, 1:, :rate] = chunk[:, :-1, :, :hd]
        expected = logits.softmax(dim=2).reshape(-1, 2 * rate, 1, hd)
    alpha, stride = gates[0]
    assert stride == 4 and alpha.shape == (10, 8, 1, hd)
    torch.testing.assert_close(alpha, expected, rtol=1e-5, atol=1e-6)
    hca = model.model.layers[1].self_attn.compressor
    with torch.no_grad():
        hca_expected = (hca.gate_proj(seen[1][:, :16]).view(2, 2, 8, hd) + hca.position_bias).softmax(dim=2)
    torch.testing.assert_close(gates[1][0], hca_expected.reshape(-1, 8, 1, hd), rtol=1e-5, atol=1e-6)
    rows = hf_gate_metrics(model, [ids])
    assert [(r["layer"], r["compressor"]) for r in rows] == [(0, "csa"), (1, "hca")]
    assert rows[0]["per_channel_mean"] and 1 <= rows[0]["static_phases"] <= 4 and len(rows[0]["phase_share"]) == 4


def test_cycling_moves_the_planted_preference_and_reports_the_r2_grid(tmp_path):
    scorer = PhaseKVScorer(planted_model(key_offset=2, value_offset=3), TOKENIZER, batch_size=64)
    result = run_cycle(scorer, [-1, 1, 3], LOOKUP, n_resamples=50, progress=False)
    assert int(np.argmax(result["base"]["gate_key_phase_share"])) == 2
    for c in result["cycles"]:
        assert int(np.argmax(c["gate_key_phase_share"])) == (2 + c["delta"]) % 8
        assert len(c["observed_change"]) == len(c["predicted_change"]) == 8
    grid = result["grid"]
    assert grid["deltas"] == [-1, 1, 3] and all(len(grid[k]) == 3 for k in ("r2", "r2_low", "r2_high"))
    assert result["boundary_phase"] == 7 and result["schema"] == "phasekv.analysis.cycle/1"
    json.dumps(result)
    # the planted model's accuracies are flat, so the figure is checked on the same result with distinct ones
    result = json.loads(json.dumps(result))
    result["base"]["accuracy_by_phase"] = [0.1 * p for p in range(8)]
    for c in result["cycles"]:
        c["accuracy_by_phase"] = [0.05 * p + 0.01 * c["delta"] + 0.2 for p in range(8)]
    spec = cycle_figure.spec(cycle_figure.model_block(result, "planted"))
    assert {"line", "area", "point"} <= spec_marks(spec)
    drawn = spec_rows(spec)
    base = [r["accuracy"] for r in sorted((r for r in drawn if r["kind"] == "base"), key=lambda r: r["phase"])]
    assert base == pytest.approx([100 * a for a in result["base"]["accuracy_by_phase"]], abs=6e-4)
    for c in result["cycles"]:
        rows = sorted((r for r in drawn if r["kind"] == "cycle" and r["delta"] == c["delta"]), key=lambda r: r["phase"])
        assert [r["accuracy"] for r in rows] == pytest.approx([100 * a for a in c["accuracy_by_phase"]], abs=6e-4)
        assert [r["prediction"] for r in rows] == [
            base[(p - c["delta"]) % 8] for p in range(8)
        ]  # A0((r - delta) mod S)
        assert [r["boundary"] for r in rows] == [p == 7 for p in range(8)]
    assert [r["phase"] for r in drawn if r["kind"] == "boundary"] == [7]
    assert plot_cycle(result, tmp_path / "c.png").read_bytes()[:8] == PNG
    with pytest.raises(ValueError, match="W = S"):
        run_cycle(PhaseKVScorer(random_model("w8s4-1kv"), TOKENIZER), [1], LOOKUP, progress=False)


def test_cycle_statistics_of_an_exactly_moved_pattern():
    rng = np.random.default_rng(0)
    base = rng.uniform(size=(12, 16))  # [mappings, residues]
    folded = fold_cells(base, 8)
    np.testing.assert_allclose(folded[:, 3], (base[:, 3] + base[:, 11]) / 2)
    stats = cycle_statistics(folded, np.roll(folded, 2, axis=1), 2, n_resamples=100)
    assert stats["r2"] == pytest.approx(1.0) and stats["r2_interval"] == pytest.approx([1.0, 1.0])
    np.testing.assert_allclose(stats["observed_change"], stats["predicted_change"], atol=1e-6)
    assert parse_deltas("-3..3") == [-3, -2, -1, 0, 1, 2, 3] and parse_deltas("-2..-1,1,2,1") == [-2, -1, 1, 2]
    with pytest.raises(ValueError, match="deltas"):
        parse_deltas("1..x")


@pytest.fixture(scope="module")
def app():
    from phasekv.cli import app  # the `phasekv` command itself, with every subcommand mounted

    return app


def test_cli_commands_on_tiny_checkpoints(app, tmp_path):
    runner = CliRunner()
    planted = save_with_tokenizer(planted_model(), tmp_path / "w8s8")
    out = tmp_path / "out"
    res = runner.invoke(app, ["knockout", str(planted), "--calibration-mappings", "2", "--out", str(out), *SMALL])
    assert res.exit_code == 0, res.output
    assert "L1H0" in res.output and (out / "knockout.json").is_file() and (out / "knockout.png").is_file()

    qwen = save_with_tokenizer(tiny_qwen3(V), tmp_path / "qwen3")
    res = runner.invoke(app, ["knockout", str(qwen), "--layers", "--out", str(out / "hf"), *SMALL])
    assert res.exit_code == 0, res.output
    assert json.loads((out / "hf" / "knockout.json").read_text())["mode"] == "layers"
    # the natural template (pretrained LMs' " cat: Bob," lists) reaches the prompts
    res = runner.invoke(
        app, ["knockout", str(qwen), "--layers", "--template", "natural", "--out", str(out / "nat"), *SMALL]
    )
    assert res.exit_code == 0, res.output
    assert json.loads((out / "nat" / "knockout.json").read_text())["options"]["template"] == "natural"

    res = runner.invoke(app, ["gates", str(planted), "--out", str(out), *SMALL])
    assert res.exit_code == 0 and (out / "gates.json").is_file(), res.output

    run_dir = tmp_path / "run"
    for step, seed in ((1, 1), (5, 2)):
        model = random_model("w8s8-1kv", seed=seed)
        ckpt = save_with_tokenizer(model, run_dir / "checkpoints" / f"step_{step:06d}")
        (ckpt / "trainer.pt").write_bytes(b"")
        write_snapshot(run_dir, gate_snapshot(model, model.config.compression, torch.randint(5, V, (2, 32)), step))
    for source in ("checkpoints", "snapshots"):
        res = runner.invoke(app, ["gates", str(run_dir), "--source", source, "--out", str(out / source), *SMALL])
        assert res.exit_code == 0, res.output
        trajectory = json.loads((out / source / "gate_trajectory.json").read_text())
        assert [s["step"] for s in trajectory["steps"]] == [1, 5] and trajectory["source"] == source
    assert run_gate_trajectory(run_dir, LOOKUP, source="auto", progress=False)["source"] == "checkpoints"

    args = ["cycle", str(planted), "--delta", "-1..1", "--resamples", "20", "--out", str(out)]
    res = runner.invoke(app, [*args, *SMALL])
    assert res.exit_code == 0 and "R^2" in res.output and (out / "cycle.png").is_file(), res.output

    w8s4 = save_with_tokenizer(random_model("w8s4-1kv"), tmp_path / "w8s4")
    res = runner.invoke(app, ["cycle", str(w8s4), "--out", str(out), *SMALL])
    assert res.exit_code == 2 and "W = S" in res.output and len(res.output.strip().splitlines()) == 1


def test_model_views_answer_the_same_questions_for_phasekv_and_hf_models():
    ours, hf = PhaseKVModel(preset_config("w8s8-1kv", vocab_size=50)), tiny_qwen3(50)
    ids = torch.randint(0, 50, (2, 24))
    for model, kind, layers in ((ours, PhaseKVView, len(ours.layers)), (hf, HFView, 2)):
        seen = view(model)
        assert type(seen) is kind and len(seen.attention_sites()) == layers
        with torch.no_grad():
            assert seen.final_logits(ids).shape == (2, 50)
    assert view(ours).head_knockouts and view(ours).gate_cycling
    assert not view(hf).head_knockouts and not view(hf).gate_cycling and view(hf).topk_hits([]) == []


class _NoKeepLM(torch.nn.Module):
    """An HF-style causal LM whose forward takes no `logits_to_keep` (it always returns every position)."""

    def __init__(self, inner):
        super().__init__()
        self.inner, self.config = inner, inner.config

    def forward(self, input_ids, use_cache=False):
        return self.inner(input_ids=input_ids, use_cache=use_cache)


def test_final_logits_equal_the_full_forward_and_own_only_their_row():
    # A whole-layer knockout keeps one final-logit tensor per layer: each must not pin the [B, T, V] logits it was
    # sliced from (SmolLM2: 30 layers x 16 x 400 x 49,152 floats ran a 24 GB machine out of memory).
    ours, hf = PhaseKVModel(preset_config("w8s8-1kv", vocab_size=50)), tiny_qwen3(50)
    ids = torch.randint(0, 50, (3, 40))
    with torch.no_grad():
        full = {
            "ours": ours(ids)[:, -1],
            "hf": hf(input_ids=ids, use_cache=False).logits[:, -1],
        }
        for name, model in (("ours", ours), ("hf", hf), ("hf", _NoKeepLM(hf))):
            logits = view(model).final_logits(ids)
            assert logits.shape == (3, 50)
            assert logits.untyped_storage().nbytes() == 3 * 50 * logits.element_size(), type(model).__name__
            torch.testing.assert_close(logits, full[name], rtol=1e-5, atol=1e-5)
