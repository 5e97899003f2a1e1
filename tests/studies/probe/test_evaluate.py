"""Probes end to end: lookup and needle on a tiny HF Qwen3 and a phasekv preset, the flip pattern on
a scorer with a planted preference, the results file, and the `eval` command line."""

import json
from fractions import Fraction

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from phasekv.cli.evaluate import eval_app
from phasekv.results.record import SCHEMA, write_results
from phasekv.scoring import load_scorer
from phasekv.stats.stride import resolve_period, resolve_stride
from phasekv.studies.flip.options import FlipOptions
from phasekv.studies.flip.pattern import best_pattern, pattern_test
from phasekv.studies.flip.result import format_flip
from phasekv.studies.flip.run import run_flip
from phasekv.studies.probe.run import run_lookup, run_needle
from phasekv.tasks.lookup import LookupOptions
from phasekv.tasks.needle import NeedleOptions
from phasekv.tasks.tokenizer import build_word_tokenizer

TOKENIZER = build_word_tokenizer()
V = len(TOKENIZER)
LOOKUP = LookupOptions(n_records=12, n_demos=3, modulus=6, n_mappings=4, seed=3)  # 4 x 6 x 9 prompts
NEEDLE = NeedleOptions(context_length=96, n_records=6, n_haystacks=4, modulus=4, spread_blocks=1, seed=3)  # 64 prompts
SUMMARY_KEYS = {"accuracy", "ci_low", "ci_high", "counts", "mean", "worst", "best", "gap_points"}
SUMMARY_KEYS |= {"period_difference_points", "uniformity", "stride"}
RESULT_KEYS = {"schema", "probe", "model", "protocol", "seed", "options", "scoring", "stride", "summary"}
RESULT_KEYS |= {"position_stats", "controls", "n_prompts", "software", "wall_time_s"}


def check_controls(result, modulus):
    assert RESULT_KEYS <= set(result) and result["schema"] == SCHEMA
    assert SUMMARY_KEYS <= set(result["summary"]) and len(result["summary"]["accuracy"]) == modulus
    assert "p_value" in result["summary"]["uniformity"]
    checks = {k: v for k, v in result["controls"].items() if k != "query_positions"}
    assert all(checks.values()), result["controls"]
    rows = result["position_stats"]
    assert [r["residue"] for r in rows] == list(range(modulus))
    assert len({r["mean_target_position"] for r in rows}) == 1
    assert len({r["var_target_position"] for r in rows}) == 1
    assert len({r["query_position"] for r in rows}) == 1
    json.dumps(result)


def test_lookup_scores_are_the_same_on_the_fast_and_plain_paths(phasekv_dir):
    """forward_at + 2 workers (the benchmark's settings) against the plain full forward on one thread."""
    options = LookupOptions(n_records=24, n_demos=4, modulus=6, n_mappings=4, seed=1)
    plain = run_lookup(load_scorer(phasekv_dir, batch_size=16, plain=True), options, n_resamples=100, progress=False)
    fast = run_lookup(load_scorer(phasekv_dir, batch_size=5, workers=2), options, n_resamples=100, progress=False)
    assert fast["cell_accuracy"] == plain["cell_accuracy"] and fast["summary"] == plain["summary"]
    assert fast["mean_answer_logprob"] == pytest.approx(plain["mean_answer_logprob"], abs=1e-5)


@pytest.mark.parametrize("kind", ["hf", "phasekv"])
def test_lookup_end_to_end(kind, qwen_dir, phasekv_dir, tmp_path):
    scorer = load_scorer(qwen_dir if kind == "hf" else phasekv_dir, batch_size=32)
    result = run_lookup(scorer, LOOKUP, n_resamples=200, progress=False)
    check_controls(result, LOOKUP.modulus)
    assert result["n_prompts"] == 4 * 6 * 9 and result["aggregation"]["n_rows"] == 4
    assert result["aggregation"]["bootstrap_unit"].startswith("mapping")
    assert result["aggregation"]["intervals"]["gap_points"] == "basic"
    assert result["summary"]["counts"] == [4 * 9] * 6 and result["summary"]["trials_per_cell"] == 9
    assert result["summary"]["stat_interval_methods"]["worst"] == "basic"
    assert result["summary"]["bootstrap_resamples"] == 200 and result["options"]["n_records"] == 12
    cells = np.array(result["cell_accuracy"])
    assert cells.shape == (4, 6)
    np.testing.assert_allclose(cells.mean(axis=0), result["summary"]["accuracy"])
    if kind == "phasekv":  # stride from the model config (W8/S4)
        assert result["stride"] == {"value": 4, "source": "model config (compression stride)"}
        assert result["model"]["config"]["compression"]["stride"] == 4
    else:
        assert result["stride"]["value"] == 3 and result["model"]["model_type"] == "qwen3"
    path = write_results(result, tmp_path / "out" / "lookup.json")
    assert json.loads(path.read_text()) == json.loads(json.dumps(result))
    assert [p.name for p in path.parent.iterdir()] == ["lookup.json"]  # no temporary file left


@pytest.mark.parametrize("kind", ["hf", "phasekv"])
def test_needle_end_to_end(kind, qwen_dir, phasekv_dir):
    scorer = load_scorer(qwen_dir if kind == "hf" else phasekv_dir, batch_size=32)
    result = run_needle(scorer, NEEDLE, stride=2, progress=False)
    check_controls(result, NEEDLE.modulus)
    assert result["summary"]["design"] == "haystacks x residues" and result["n_prompts"] == 64
    assert result["summary"]["stat_intervals"]["gap_points"] and result["summary"]["n_mappings"] == 4
    # an untrained model: its mean's interval reaches chance, so no verdict either way
    assert result["phase_test"]["period"] == 2 and result["phase_test"]["verdict"] == "not judged: at chance"
    assert result["stride"] == {"value": 2, "source": "option"}
    assert result["controls"]["query_positions"] == [NEEDLE.context_length - 1]


def test_lookup_in_sequence_protocol_keeps_the_controls(phasekv_dir):
    options = LookupOptions(n_records=12, n_demos=3, modulus=4, n_mappings=4, protocol="in-sequence")
    result = run_lookup(load_scorer(phasekv_dir, batch_size=32), options, n_resamples=50, progress=False)
    check_controls(result, 4)
    assert result["protocol"] == "in-sequence"


class PlantedScorer:
    """Prefers "8" when the filler length L satisfies L mod 4 in {2, 3}, else "32" (tokens "3" "2"),
    except for the lorem family at L = 21, which is flipped."""

    batch_size = 8
    compression_stride = None

    def __init__(self, context_ids):
        self.tokenizer = TOKENIZER
        self.n_context = len(context_ids)
        self.eight, self.three, self.two = TOKENIZER.convert_tokens_to_ids(["8", "3", "2"])
        self.lorem = TOKENIZER.convert_tokens_to_ids("lorem")

    def logprobs(self, sequences, n_last=1):
        out = torch.full((len(sequences), n_last, V), -20.0)
        for i, seq in enumerate(sequences):
            first = len(seq) - n_last  # the position that predicts the answer's first token
            length = first + 1 - self.n_context
            eight = length % 4 in (2, 3)
            if length == 21 and self.lorem in seq:
                eight = not eight
            out[i, 0, self.eight if eight else self.three] = -0.1
            out[i, 0, self.three if eight else self.eight] = -3.0
            if n_last > 1:
                out[i, 1, self.two] = -0.01
        return torch.log_softmax(out, -1)

    def describe(self):
        return {"kind": "planted"}


def test_flip_finds_a_planted_period_four_pattern():
    options = FlipOptions(context="y = T . Cast ( FP", min_length=16, n_lengths=16, n_permutations=500)
    context_ids = TOKENIZER(options.context, add_special_tokens=False)["input_ids"]
    result = run_flip(PlantedScorer(context_ids), options, progress=False)
    assert result["period"]["value"] == 4 and "default" in result["period"]["source"]
    assert [c["tokens"] for c in result["candidates"]] == [["8"], ["3", "2"]]
    families = result["families"]
    assert len(families) >= 4
    expected = ["8" if length % 4 in (2, 3) else "32" for length in range(16, 32)]
    assert families["equals"]["top"] == expected
    assert families["equals"]["pattern"]["agree"] == 16
    assert families["lorem"]["pattern"]["agree"] == 15
    pooled = result["pattern"]["pooled"]
    assert pooled["favoured_text"] == ["32", "32", "8", "8"]
    assert pooled["description"] == "8 when L mod 4 in {2, 3}; 32 when L mod 4 in {0, 1}"
    assert pooled["agree"] == 16 * len(families) - 1 and pooled["total"] == 16 * len(families)
    test = result["pattern"]["test"]
    assert (
        test["permutation_p_value"] < 0.01 and test["constant_pattern_agree"] == 8 * len(families) + 1
    )  # lorem L=21 adds an 8
    p8 = np.array(families["equals"]["probabilities"])[:, 0]
    assert np.all((p8 > 0.5) == np.array([t == "8" for t in expected]))
    assert "60" not in format_flip(result) and "of 80 rankings follow it" in format_flip(result)


def test_best_pattern_majorities_ties_and_empty_classes():
    winners = np.array([[0, 1, 1, 0, 0, 1], [0, 1, 0, 0, 1, 1]])
    pattern = best_pattern(winners, lengths=np.arange(6), period=3, n_candidates=2)
    # class 0: lengths 0, 3 -> all 0; class 1: lengths 1, 4 -> 1,0,1,1 -> 1; class 2: 1,0,1,1 -> 1
    assert pattern.favoured == [0, 1, 1] and pattern.agree == 4 + 3 + 3 and pattern.total == 12
    tie = best_pattern([0, 1], lengths=[0, 4], period=4, n_candidates=2)
    assert tie.favoured == [0, None, None, None] and tie.agree == 1
    test = pattern_test(winners, np.arange(6), 3, 2, n_permutations=100, seed=0)
    assert test["observed_agree"] == 10 and 0 < test["permutation_p_value"] <= 1


def test_stride_and_period_resolution():
    assert resolve_stride(None, 4, 24) == (4, "model config (compression stride)")
    assert resolve_stride(None, 8, 8)[0] is None
    assert resolve_stride(None, None, 24)[0] == 12
    assert resolve_stride(3, 4, 8) == (3, "option")
    with pytest.raises(ValueError, match="stride"):
        resolve_stride(8, None, 8)
    assert resolve_period(None, 2) == (2, "model config (compression stride)")
    assert resolve_period(None, None)[0] == 4


runner = CliRunner()


def test_cli_says_once_that_there_is_no_period_check_and_which_period_the_verdict_tests(phasekv_dir):
    """The w8s4 model's stride 4 is not below modulus 4: no period check, and the verdict's period said with it."""
    args = ["lookup", str(phasekv_dir), "--records", "12", "--demos", "3", "--mappings", "2", "--modulus", "4"]
    result = runner.invoke(eval_app, [*args, "--spread-blocks", "4", "--resamples", "50", "--threads", "1", "--quiet"])
    assert result.exit_code == 0, result.output
    said = "period 4: the model's compression stride (not below the modulus 4: no period check); wall time"
    assert said in result.output and result.output.count("no period check") == 1
    assert "None" not in result.output and "stride for the period check" not in result.output
    assert "phase verdict at period 4:" in result.output


def test_cli_lookup_writes_results_and_prints_the_table(phasekv_dir, tmp_path):
    out = tmp_path / "lookup.json"
    args = ["lookup", str(phasekv_dir), "--records", "12", "--demos", "3", "--mappings", "4", "--modulus", "6"]
    args += ["--held-out-seed", "2"]
    result = runner.invoke(eval_app, [*args, "--resamples", "100", "--threads", "1", "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    for text in ("residue", "gap", "p =", "position controls held", "stride for the period check: 4"):
        assert text in result.output
    assert "held-out pairs (seed 2, 1/4)" in result.output and "basic bootstrap" in result.output
    saved = json.loads(out.read_text())
    assert saved["probe"] == "lookup" and saved["scoring"]["threads"] == 1
    assert saved["options"]["held_out_seed"] == 2 and saved["options"]["held_out_modulus"] == 4
    assert saved["options"]["pairs"] == "held out of training: HeldOutPairs(seed=2, modulus=4)"
    assert Fraction(saved["options"]["design_variance"]) > 0


def test_cli_needle_and_flip(qwen_dir, tmp_path):
    args = ["needle", str(qwen_dir), "--context-length", "96", "--records", "6", "--haystacks", "4"]
    result = runner.invoke(eval_app, [*args, "--modulus", "4", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "bootstrap" in result.output and "permutation within mappings" in result.output
    assert "phase verdict at period 2:" in result.output and "placebo periods: P=3" in result.output
    context = tmp_path / "context.txt"
    context.write_text("y = T . Cast ( FP")
    args = ["flip", str(qwen_dir), "--context", f"@{context}", "--candidates", "8,32", "--lengths", "8"]
    result = runner.invoke(eval_app, [*args, "--families", "equals,lorem,numbers,prose", "--period", "4", "--quiet"])
    assert result.exit_code == 0, result.output
    assert "of 32 rankings follow it" in result.output and "permutation p" in result.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["lookup", "/no/such/model"], "model directory /no/such/model does not exist"),
        (["needle", "{model}", "--protocol", "sideways"], "unknown padding protocol 'sideways'"),
        (["flip", "{model}", "--candidates", "8"], "at least two distinct candidates"),
        (["flip", "{model}", "--context", "@/no/file"], "context file /no/file does not exist"),
        (["lookup", "{model}", "--mappings", "5", "--placements", "1"], "not a multiple of the design size"),
    ],
)
def test_cli_bad_input_is_one_line(args, message, phasekv_dir):
    result = runner.invoke(eval_app, [a.format(model=phasekv_dir) for a in args])
    assert result.exit_code == 2
    assert result.output.startswith("phasekv eval: error: ") and message in result.output
    assert len(result.output.strip().splitlines()) == 1
