"""Planning and progress of the probes (the plan's counts are what is then scored, the bar moves
per batch, a dry run writes nothing), the per-prompt records in every result, the prompt dump,
the compact results JSON, and the bins of the accuracy-by-position figure."""

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from phasekv.cli.evaluate import eval_app
from phasekv.results.record import dump_prompts, prompt_prefix, results_json
from phasekv.scoring import load_scorer, score_answers
from phasekv.serve import EndpointScorer
from phasekv.stats import wilson_interval
from phasekv.studies.flip.options import FlipOptions
from phasekv.studies.flip.run import flip_prompts, plan_flip, run_flip
from phasekv.studies.probe import scored as scored_module
from phasekv.studies.probe.plan import ScoringProgress
from phasekv.studies.probe.positions import position_bins
from phasekv.studies.probe.run import run_lookup, run_needle
from phasekv.studies.probe.scored import plan_prompt_set, score_prompt_set
from phasekv.tasks.lookup import LookupOptions, lookup_prompts
from phasekv.tasks.needle import NeedleOptions, needle_prompts
from serving_helpers import FAST, counting_handler, serving

LOOKUP = LookupOptions(n_records=12, n_demos=3, modulus=6, n_mappings=4, seed=3)  # prefix: repeated prompts
NEEDLE = NeedleOptions(context_length=96, n_records=6, n_haystacks=4, modulus=4, seed=3)
FLIP = FlipOptions(context="y = T . Cast ( FP", n_lengths=6, families=("equals", "lorem"), n_permutations=20)
DESIGNS = {
    "lookup prefix": (lookup_prompts, LOOKUP),
    "lookup in-sequence": (lookup_prompts, replace(LOOKUP, protocol="in-sequence")),
    "needle": (needle_prompts, NEEDLE),
}


def built(build, tokenizer, options):
    """The prompts a run scores: a task's prompt builder with the run's prompt prefix."""
    return build(tokenizer, options, prompt_prefix(tokenizer)).prompts


def count_forward_passes(scorer) -> list[int]:
    """Rows of every forward pass the scorer makes from now on (one entry per batch)."""
    calls, inner = [], scorer._logits

    def logits(ids, positions):
        calls.append(ids.shape[0])
        return inner(ids, positions)

    scorer._logits = logits
    return calls


class RecordingProgress(ScoringProgress):
    """The progress bar, remembering where it stood after every update."""

    seen: list = []

    def __call__(self, rows):
        super().__call__(rows)
        RecordingProgress.seen.append((rows, self.bar.n))


# ---------- the plan is what is scored ----------


@pytest.mark.parametrize("design", DESIGNS)
def test_planned_rows_and_batches_are_the_forward_passes_made(design, phasekv_dir, monkeypatch):
    monkeypatch.setattr(scored_module, "CHUNK_PROMPTS", 50)  # several chunks: identical prompts repeat across them
    build, options = DESIGNS[design]
    scorer = load_scorer(phasekv_dir, batch_size=5, workers=2)
    prompts = built(build, scorer.tokenizer, options)
    plan = plan_prompt_set(prompts, scorer.batch_size)
    calls = count_forward_passes(scorer)
    score_prompt_set(
        scorer, prompts, key_length=options.key_tokens if design == "needle" else 1, desc="", progress=False
    )
    assert plan.n_prompts == len(prompts)
    assert (plan.n_rows, plan.n_batches) == (sum(calls), len(calls)) and max(calls) <= 5
    assert plan.longest == max(len(p.input_ids) + len(p.answer_ids) - 1 for p in prompts)
    assert plan.design["residue groups"] == options.modulus
    if design == "lookup prefix":
        assert plan.n_rows < plan.n_prompts  # identical prompts are scored once


def test_planned_flip_passes_are_the_forward_passes_made(phasekv_dir):
    scorer = load_scorer(phasekv_dir, batch_size=4)
    plan = plan_flip(flip_prompts(scorer.tokenizer, FLIP), scorer.batch_size)
    calls = count_forward_passes(scorer)
    result = run_flip(scorer, FLIP, progress=False)
    assert (plan.n_rows, plan.n_batches) == (sum(calls), len(calls))
    assert plan.n_prompts == result["prompt_records"]["n"] == 2 * 6 * 2
    assert {len(c["ids"]) for c in result["candidates"]} == {1, 2}  # two answer lengths: two groups per family


def test_planned_requests_are_the_requests_sent(phasekv_dir):
    scorer = load_scorer(phasekv_dir)
    handler = counting_handler()
    with serving(scorer, handler) as server:
        endpoint = EndpointScorer(server.url, "tiny", phasekv_dir, concurrency=2, **FAST)
        prompts = built(lookup_prompts, endpoint.tokenizer, LOOKUP)
        plan = plan_prompt_set(prompts, endpoint.batch_size, requests=True)
        updates = []
        contexts, answers = [p.input_ids for p in prompts], [p.answer_ids for p in prompts]
        score_answers(endpoint, contexts, answers, updates.append)
    assert plan.requests and plan.n_rows == len(handler.answered) == len(updates) and set(updates) == {1}
    assert "requests" in plan.describe()


# ---------- progress ----------


def test_the_bar_moves_after_every_batch_and_the_run_is_estimated(phasekv_dir, monkeypatch, capsys):
    monkeypatch.setattr(scored_module, "ScoringProgress", RecordingProgress)
    RecordingProgress.seen = []
    scorer = load_scorer(phasekv_dir, batch_size=4)
    options = replace(LOOKUP, protocol="in-sequence")
    plan = plan_prompt_set(built(lookup_prompts, scorer.tokenizer, options), 4)
    run_lookup(scorer, options, n_resamples=20, progress=True)
    seen = RecordingProgress.seen
    assert len(seen) == plan.n_batches == 216 // 4 and all(rows == 4 for rows, _ in seen)
    assert [n for _, n in seen] == list(range(4, 217, 4))  # one step per batch, not one per chunk
    err = capsys.readouterr().err
    assert err.index("plan: 216 prompts; 216 distinct prompts") < err.index("estimated total time: about")
    assert "54 forward passes of up to 4 prompts" in err and "residue groups 6, units 4" in err


def test_endpoint_progress_counts_cached_answers_at_once(phasekv_dir, tmp_path):
    scorer = load_scorer(phasekv_dir)
    contexts, answers = [[3, 4, 5], [3, 4, 6], [3, 4, 5]], [[7], [8], [7]]
    with serving(scorer) as server:
        endpoint = EndpointScorer(server.url, "tiny", phasekv_dir, cache=tmp_path / "c.jsonl", **FAST)
        first, again = [], []
        score_answers(endpoint, contexts[:1], answers[:1], first.append)
        score_answers(endpoint, contexts, answers, again.append)
    assert first == [1] and again == [1, 1]  # the cached pair at once, then the one new request


# ---------- dry run ----------


@pytest.mark.parametrize(
    ("probe", "args", "prompts"),
    [
        ("lookup", ["--records", "12", "--demos", "3", "--modulus", "6", "--mappings", "4", "--seed", "3"], 216),
        (
            "needle",
            ["--context-length", "96", "--records", "6", "--haystacks", "4", "--modulus", "4", "--spread-blocks", "1"],
            64,
        ),
        ("flip", ["--context", FLIP.context, "--lengths", "6", "--families", "equals,lorem"], 24),
    ],
)
def test_dry_run_prints_the_plan_loads_no_model_and_writes_nothing(probe, args, prompts, phasekv_dir, tmp_path):
    out = tmp_path / "out"
    dry = CliRunner().invoke(eval_app, [probe, str(phasekv_dir), *args, "--dry-run", "--out", str(out / "r.json")])
    assert dry.exit_code == 0, dry.output
    assert f"plan: {prompts} prompts" in dry.output and "dry run: nothing scored" in dry.output
    assert "No time estimate" in dry.output and not out.exists()
    real = CliRunner().invoke(eval_app, [probe, str(phasekv_dir), *args, "--quiet", "--out", str(out / "r.json")])
    assert real.exit_code == 0, real.output
    assert json.loads((out / "r.json").read_text())["prompt_records"]["n"] == prompts


def test_dry_run_loads_no_model_and_sends_no_request(phasekv_dir, tmp_path, monkeypatch):
    import phasekv.scoring

    def no_model(*args, **kwargs):
        raise AssertionError("a dry run loaded the model")

    monkeypatch.setattr(phasekv.scoring, "load_scorer", no_model)
    args = ["lookup", str(phasekv_dir), "--records", "12", "--mappings", "4", "--modulus", "6", "--dry-run"]
    local = CliRunner().invoke(eval_app, args)
    assert local.exit_code == 0, local.output
    closed = ["--endpoint", "http://127.0.0.1:9", "--served-model", "tiny", "--concurrency", "3"]
    remote = CliRunner().invoke(eval_app, [*args, *closed])  # nothing listens there: any request would fail
    assert remote.exit_code == 0, remote.output
    assert "distinct requests" in remote.output and "3 requests in flight" in remote.output


# ---------- per-prompt records ----------


def _columns(result) -> dict:
    records = result["prompt_records"]
    columns = {name: np.array(values) for name, values in records["columns"].items()}
    assert {len(v) for v in columns.values()} == {records["n"]} and records["n"] == result.get(
        "n_prompts", records["n"]
    )
    return columns


class OracleScorer:
    """A stand-in that answers a prompt right exactly when `rule(prompt)` holds (else it puts its
    top-1 on another token), so the accuracy of every residue, unit and position is known."""

    batch_size = 8
    compression_stride = None

    def __init__(self, tokenizer, prompts, rule):
        self.tokenizer = tokenizer
        self.answers = {tuple(p.input_ids + p.answer_ids[:-1]): (p.answer_ids, rule(p)) for p in prompts}

    def logprobs(self, sequences, n_last=1):
        vocab = len(self.tokenizer)
        out = torch.full((len(sequences), n_last, vocab), -20.0)
        for i, sequence in enumerate(sequences):
            answer, right = self.answers[tuple(sequence)]
            for j, token in enumerate(answer):
                out[i, j, token if right else (token + 1) % vocab] = 0.0
        return torch.log_softmax(out, -1)

    def describe(self):
        return {"kind": "oracle"}


def _rule(p) -> bool:
    return p.target_position % 5 != 0 and p.unit != 1


@pytest.mark.parametrize("probe", ["lookup", "needle"])
def test_records_have_one_row_per_prompt_and_agree_with_the_summary(probe, phasekv_dir):
    tokenizer = load_scorer(phasekv_dir).tokenizer
    build, options = DESIGNS["lookup in-sequence" if probe == "lookup" else "needle"]
    prompts = list(built(build, tokenizer, options))
    scorer = OracleScorer(tokenizer, prompts, _rule)
    if probe == "lookup":
        result = run_lookup(scorer, options, n_resamples=20, progress=False)
    else:
        result = run_needle(scorer, options, progress=False)
    c = _columns(result)
    assert result["prompt_records"]["unit"] == ("mapping" if probe == "lookup" else "haystack")
    assert c["correct"].tolist() == [_rule(p) for p in prompts]  # one row per prompt, in prompt order
    assert c["target_position"].tolist() == [p.target_position for p in prompts]
    assert 0 < c["correct"].mean() < 1
    by_residue = [c["correct"][c["residue"] == r].mean() for r in range(options.modulus)]
    np.testing.assert_allclose(by_residue, result["summary"]["accuracy"])
    assert np.all(c["target_position"] % options.modulus == c["residue"])
    assert c["answer_logprob"].mean() == pytest.approx(result["mean_answer_logprob"], abs=1e-6)
    assert set(c["query_position"]) == set(result["controls"]["query_positions"])
    if probe == "lookup":  # the cells are means over placements of one mapping at one residue
        cells = np.zeros((options.n_mappings, options.modulus))
        np.add.at(cells, (c["unit"], c["residue"]), c["correct"] / (len(c["unit"]) / cells.size))
        np.testing.assert_allclose(cells, result["cell_accuracy"], atol=1e-6)


def test_flip_records_agree_with_the_families(phasekv_dir):
    result = run_flip(load_scorer(phasekv_dir), FLIP, progress=False)
    c = _columns(result)
    records = result["prompt_records"]
    assert records["unit_names"] == ["equals", "lorem"] and records["candidates"] == ["8", "32"]
    for u, family in enumerate(records["unit_names"]):
        rows = c["unit"] == u
        logprob = c["answer_logprob"][rows].reshape(6, 2)
        np.testing.assert_allclose(logprob, result["families"][family]["logprobs"], atol=1e-6)
        np.testing.assert_array_equal(c["filler_length"][rows][::2], result["families"][family]["lengths"])
    assert np.all(c["residue"] == c["filler_length"] % result["period"]["value"])
    assert np.all(c["query_position"] - c["target_position"] == len(result["context_ids"]) - 1)


# ---------- prompt dump and results JSON ----------


def test_dump_prompts_round_trips(phasekv_dir, tmp_path):
    path = tmp_path / "prompts.jsonl"
    args = ["lookup", str(phasekv_dir), "--records", "12", "--demos", "3", "--modulus", "6", "--mappings", "4"]
    res = CliRunner().invoke(eval_app, [*args, "--seed", "3", "--quiet", "--dump-prompts", str(path)])
    assert res.exit_code == 0, res.output
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    scorer = load_scorer(phasekv_dir)
    prompts = built(lookup_prompts, scorer.tokenizer, LOOKUP)
    assert len(lines) == len(prompts) == 216 and [line["index"] for line in lines] == list(range(216))
    for line, prompt in zip(lines, prompts, strict=True):
        assert line["input_ids"] == prompt.input_ids and line["answer_ids"] == prompt.answer_ids
        assert (line["target_position"], line["residue"], line["unit"]) == (
            prompt.target_position,
            prompt.residue,
            prompt.unit,
        )
        assert scorer.tokenizer(line["text"], add_special_tokens=False)["input_ids"] == prompt.input_ids
    dry = tmp_path / "dry.jsonl"
    assert CliRunner().invoke(eval_app, [*args, "--seed", "3", "--dry-run", "--dump-prompts", str(dry)]).exit_code == 0
    assert dry.read_text() == path.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dry.jsonl", "prompts.jsonl"]  # no temporary files left


def test_a_failed_dump_leaves_no_file(tmp_path):
    def rows():
        yield {"input_ids": [1], "answer_ids": [2]}
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        dump_prompts(rows(), tmp_path / "p.jsonl")
    assert list(tmp_path.iterdir()) == []


def test_results_json_puts_number_lists_on_one_line_and_reads_back_the_same():
    result = {"a": [1, -2.5, 3e-07, True, None], "s": ["[\n 1\n]", "x"], "m": [[1, 2], [3]], "e": [], "d": {"k": [0]}}
    text = results_json(result)
    assert json.loads(text) == result
    assert '"a": [1, -2.5, 3e-07, true, null]' in text and '"k": [0]' in text and '"s": [\n' in text


# ---------- the position figure's bins ----------


def test_position_bins_are_equal_width_with_wilson_intervals():
    t = np.arange(10).repeat(3)  # positions 0..9, three prompts each
    correct = (t < 4) | ((t == 7) & (np.arange(30) % 3 == 0))
    bins = position_bins(t, correct, max_bins=5)
    assert bins["first"] == [0, 2, 4, 6, 8] and bins["last"] == [1, 3, 5, 7, 9] and bins["n"] == [6] * 5
    assert bins["center"] == [0.5, 2.5, 4.5, 6.5, 8.5]
    np.testing.assert_allclose(bins["accuracy"], [1, 1, 0, 1 / 6, 0])
    low, high = wilson_interval(np.array([6, 6, 0, 1, 0]), 6)
    np.testing.assert_allclose(bins["low"], low)
    np.testing.assert_allclose(bins["high"], high)


def test_position_bins_cover_every_position_once_and_drop_empty_bins():
    rng = np.random.default_rng(0)
    t = np.concatenate([rng.integers(100, 113, 200), [180, 181]])  # a gap: empty bins in between
    bins = position_bins(t, rng.random(t.size) < 0.5)
    assert sum(bins["n"]) == t.size and len(bins["n"]) < 12
    spans = list(zip(bins["first"], bins["last"], strict=True))
    assert all(a <= b for a, b in spans) and all(b1 < a2 for (_, b1), (a2, _) in zip(spans, spans[1:], strict=False))
    for (a, b), n in zip(spans, bins["n"], strict=True):
        assert n == np.sum((t >= a) & (t <= b))
    assert position_bins([5, 5, 5], [1, 0, 1])["n"] == [3]  # one position: one bin
    few = position_bins([1, 2, 4], [1, 1, 0])
    assert few["first"] == [1, 2, 4] and few["last"] == [1, 2, 4]  # fewer positions than bins: one bin each
    with pytest.raises(ValueError, match="non-empty"):
        position_bins([], [])
