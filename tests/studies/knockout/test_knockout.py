"""The knockout map: KV-head and whole-layer knockouts by mean replacement, against a manual knockout."""

import dataclasses
import json

import pytest
import torch

from analysis_helpers import LOOKUP, PNG, TOKENIZER, V, _dsv4, random_model, spec_marks, spec_rows
from conftest import needs_dsv4, tiny_qwen3
from phasekv.internals.probe_prompts import calibration_options, check_disjoint, lookup_prompts, unique_ids
from phasekv.scoring import PhaseKVScorer
from phasekv.studies.knockout import figure as knockout_figure
from phasekv.studies.knockout import run as knockout_run
from phasekv.studies.knockout.ablation import final_position_means, knockout_logits_reference
from phasekv.studies.knockout.figure import plot_knockout
from phasekv.studies.knockout.layers import final_attention_means, knocked_final_logits
from phasekv.studies.knockout.options import KnockoutOptions
from phasekv.studies.knockout.run import run_knockout

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
