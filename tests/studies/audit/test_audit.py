"""`phasekv audit` and `phasekv.audit`: the screen uses mappings the run never scores, the plan comes before any
probe is scored, the design follows the budget or the target MDE, bad input fails before scoring, and the
result, its files and its one-screen text agree."""

from __future__ import annotations

import html
import time
import zlib
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import phasekv
from phasekv.auditing.run import (
    REPORT_RESERVE_S,
    SCREEN_SPLIT,
    AuditError,
    lookup_design,
    run_audit,
    size_design,
    spreads,
)
from phasekv.cli import app
from phasekv.results.record import prompt_prefix
from phasekv.stats.format import format_verdict
from phasekv.stats.stride import PRESS_GRID, default_period
from phasekv.stats.verdict import MAX_MDE_POINTS
from phasekv.studies.audit.options import AuditOptions, parse_duration
from phasekv.studies.audit.result import AuditResult, ScreenedTemplate, plan_line
from phasekv.tasks.lookup import LookupOptions, lookup_prompts
from phasekv.tasks.tokenizer import build_word_tokenizer

TOKENIZER = build_word_tokenizer()
SMALL = dict(
    n_records=8,
    n_demos=2,
    spread_blocks=2,
    mappings=(2, 3),
    haystacks=(2,),
    needle=False,
    screen_prompts=6,
    n_resamples=50,
)


class InductionScorer:
    """Answers like an induction head: the token after the last earlier occurrence of the two tokens before the
    predicted position; right on about `share` of the prompts (chosen by a hash of the prompt), otherwise one
    token off, so its accuracy is known without a model."""

    batch_size = 16
    compression_stride = None

    def __init__(self, share: float = 0.7, seconds_per_call: float = 0.0):
        self.tokenizer = TOKENIZER
        self.share = share
        self.seconds_per_call = seconds_per_call  # a known speed, for tests whose plan depends on the timing
        self.calls = 0

    def logprobs(self, sequences, n_last=1):
        self.calls += 1
        time.sleep(self.seconds_per_call)
        vocab = len(self.tokenizer)
        out = torch.full((len(sequences), n_last, vocab), -20.0)
        for i, sequence in enumerate(sequences):
            right = zlib.crc32(bytes(str(sequence[: len(sequence) - n_last + 1]), "ascii")) % 100 < 100 * self.share
            for j in range(n_last):
                end = len(sequence) - n_last + 1 + j
                key = sequence[end - 2 : end]
                starts = [s for s in range(end - 2) if sequence[s : s + 2] == key]
                token = sequence[starts[-1] + 2] if starts else 0
                out[i, j, token if right else (token + 1) % vocab] = 0.0
        return torch.log_softmax(out, -1)

    def describe(self):
        return {"kind": "induction", "path": "induction-scorer"}


def test_durations_and_goals_are_checked_before_anything_runs():
    assert parse_duration("10m") == 600 and parse_duration("90s") == 90 and parse_duration("1.5h") == 5400
    for bad in ("ten minutes", "0", "-5m"):
        with pytest.raises(ValueError, match="budget"):
            parse_duration(bad)
    # a budget and an MDE together: the budget sizes the design, the MDE is its target and the verdict's bound
    both = AuditOptions(budget_s=60, mde_points=10)
    assert both.goal == "budget" and both.budget == 60 and both.max_mde == 10
    assert AuditOptions().max_mde == MAX_MDE_POINTS and AuditOptions(mde_points=10).goal == "mde"
    with pytest.raises(ValueError, match="templates must be"):
        AuditOptions(templates=("poem",))
    assert AuditOptions().budget == 600 and AuditOptions(mde_points=10).budget is None
    # with a budget a design may narrow its span of positions before the audit gives up; an MDE target may not
    assert spreads(AuditOptions()) == [6, 4, 2] and spreads(AuditOptions(mde_points=10)) == [6]


def test_a_budget_too_small_fails_before_any_scoring(tmp_path):
    scorer = InductionScorer()
    with pytest.raises(AuditError, match="nothing was scored"):
        run_audit(scorer, AuditOptions(budget_s=REPORT_RESERVE_S / 2, **SMALL), tmp_path / "a", echo=lambda _: None)
    assert scorer.calls == 0 and not (tmp_path / "a").exists()
    # a budget the screen leaves too little of: the design fails before the lookup is scored (a scorer slow
    # enough that the smallest design cannot fit in one second, however fast the machine)
    calls = []
    with pytest.raises(AuditError, match="the smallest design .* needs about"):
        run_audit(
            InductionScorer(seconds_per_call=0.05),
            AuditOptions(budget_s=REPORT_RESERVE_S + 1.0, **{**SMALL, "templates": ("paper",), "screen_prompts": 2}),
            tmp_path / "b",
            started=time.perf_counter(),
            echo=calls.append,
        )
    assert not (tmp_path / "b" / "lookup.json").exists() and not any(c.startswith("plan lookup") for c in calls)


def test_bad_input_on_the_command_line_is_one_line_before_loading(tmp_path):
    runner = CliRunner()
    missing = runner.invoke(app, ["audit", str(tmp_path / "nope"), "--budget", "10m"])
    assert missing.exit_code == 2 and "no model folder at" in missing.output
    bad = runner.invoke(app, ["audit", str(tmp_path), "--budget", "soon"])
    assert bad.exit_code == 2 and "give a duration" in bad.output


@pytest.mark.slow
def test_audit_screens_apart_plans_first_and_writes_what_it_prints(tmp_path):
    scorer, out, lines = InductionScorer(), tmp_path / "audit", []

    def echo(line):  # the plan must be printed before any probe result exists
        lines.append((line, (out / "lookup.json").exists()))

    # three mappings cannot reach the MDE bound: `anyway` scores them, as the audit's files are what is tested
    audit = run_audit(scorer, AuditOptions(budget_s=600, anyway=True, **SMALL), out, echo=echo, progress=False)
    assert isinstance(audit, AuditResult) and str(audit) == audit.summary
    screened = {s.template: s for s in audit.screen}
    assert screened["sentence"].error is not None  # the word tokenizer lacks its words
    assert audit.template in ("natural", "paper") and screened[audit.template].accuracy > 0.4
    plan_lines = [written for line, written in lines if line.startswith("plan lookup")]
    assert plan_lines == [False]
    # the budget left room for the largest design offered
    assert audit.plan[0].options["n_mappings"] == 3 and audit.plan[1].skipped
    lookup = audit.probe_result("lookup")
    assert lookup.options["n_mappings"] == 3 and lookup.options["split"] == "eval"
    # the screen drew its mappings from another split: none of its prompts is one the run scored
    prefix = prompt_prefix(TOKENIZER)
    design = lookup_design(audit_options := AuditOptions(**SMALL), audit.template, 8, 3)
    screen = lookup_design(audit_options, audit.template, 8, 2, split=SCREEN_SPLIT)
    run_prompts = {tuple(p.input_ids) for p in lookup_prompts(TOKENIZER, design, prefix).prompts}
    assert audit.screen_split == "calibration"
    assert not run_prompts & {tuple(p.input_ids) for p in lookup_prompts(TOKENIZER, screen, prefix).prompts}
    # what is printed is what was written: the verdict block is `format_verdict`'s, the files are there
    assert format_verdict(lookup.phase_test) in audit.summary
    assert audit.verdict == lookup.verdict
    assert f"re-measure: phasekv eval lookup induction-scorer --like {out / 'lookup.json'}" in audit.summary
    assert (out / "report.html").stat().st_size > 10_000
    assert AuditResult.load(out / "audit.json").summary == audit.summary
    assert audit.figure()["$schema"].startswith("https://vega.github.io/schema/vega-lite")


@pytest.mark.slow
def test_an_mde_target_picks_the_smallest_design_that_reaches_it(tmp_path):
    scorer = InductionScorer()
    # every design whose MDE is finite reaches 100 points: the smallest of them must be taken, not the largest
    audit = phasekv.audit(scorer, out=tmp_path / "m", mde=100, **{**SMALL, "mappings": (2, 3)})
    planned = audit.plan[0].planned_mde
    assert planned["points"] <= 100 and audit.budget_s is None
    assert audit.plan[0].options["n_mappings"] == 2 == audit.probe_result().options["n_mappings"]
    assert '"schema": "phasekv.audit/1"' in audit.to_json()
    unreachable = AuditOptions(mde_points=0.5, **{**SMALL, "mappings": (2,)})
    with pytest.raises(AuditError, match="no design up to 2 units reaches an MDE of 0.5"):
        run_audit(scorer, unreachable, tmp_path / "u", echo=lambda _: None, progress=False)
    assert not (tmp_path / "u" / "lookup.json").exists()


@pytest.mark.slow
def test_a_served_model_is_audited_like_a_local_one(phasekv_dir, tmp_path):
    from phasekv.scoring import load_scorer
    from phasekv.serve import EndpointScorer
    from phasekv.studies.probe.run import run_lookup
    from serving_helpers import serving

    local = load_scorer(phasekv_dir)
    options = AuditOptions(budget_s=600, anyway=True, **{**SMALL, "templates": ("paper",), "mappings": (2,)})
    with serving(local, name="tiny") as server:
        remote = EndpointScorer(server.url + "/v1", "tiny", phasekv_dir, cache=None)
        audit = run_audit(remote, options, tmp_path / "served", echo=lambda _: None, progress=False)
    assert audit.model["kind"] == "endpoint" and audit.summary.startswith("audit of tiny")
    endpoint = audit.model["endpoint"]
    assert f"phasekv eval lookup --endpoint {endpoint} --served-model tiny --tokenizer {phasekv_dir}" in str(audit)
    served = audit.probe_result()
    here = run_lookup(local, LookupOptions(**served.extra("requested_options")), n_resamples=50, progress=False)
    assert served.extra("cell_accuracy") == here["cell_accuracy"]
    assert served.extra("mean_answer_logprob") == pytest.approx(here["mean_answer_logprob"], rel=1e-5)


def test_the_audit_writes_a_report_that_opens_on_the_audit(pretrained_audit):
    """audit.json is written before the report is built, so the report holds the audit's model, plan and
    re-measure command (tests/report/test_report_audit.py checks that page in full)."""
    text = (Path(pretrained_audit.out) / "report.html").read_text()
    finding = text.index('id="audit-finding"')
    assert finding < text.index('id="sec-residues"')
    assert html.escape(pretrained_audit.probes["lookup"].command) in text[finding:]
    assert html.escape(plan_line(pretrained_audit.plan[0])) in text[finding:]


def _sized(options: AuditOptions, left: float, seconds_per_prompt: float = 5.0):
    """The lookup design `size_design` picks for `options` with `left` seconds left, at a known time per prompt
    (a fixed clock: nothing is timed but the MDE simulations, a few percent of these budgets at most)."""
    scorer = InductionScorer()
    rate = ScreenedTemplate(
        template="paper",
        accuracy=0.7,
        prompts=1,
        distinct_prompts=1,
        seconds=1.0,
        seconds_per_prompt=seconds_per_prompt,
        longest=10**6,  # no length scaling: the price is per prompt
    )
    sized = size_design(
        scorer,
        lookup_prompts,
        lambda n: lookup_design(options, "paper", 8, n),
        options.mappings,
        options,
        rate,
        None,
        rate.accuracy,
        lambda: left,
    )
    assert not isinstance(sized, str), sized
    return sized


def test_a_budget_is_spent_not_left_on_a_coarse_grid_of_designs():
    options = AuditOptions(budget_s=600, **{**SMALL, "mappings": (2, 16)})
    per_mapping = _sized(options, 1e9)[1].distinct / 16 * 5.0  # seconds of scoring one mapping adds
    for mappings in (9.5, 12.6, 15.4):  # budgets between the grid's two designs (the last grid one fitting: 2)
        left = mappings * per_mapping
        plan, candidate = _sized(options, left)
        assert 0.9 * left <= plan.eta_s <= left, (mappings, plan.eta_s, left)
        assert 2 < candidate.options.n_mappings < 16  # neither of the grid's: the count between them
    # with a target MDE that a smaller design already reaches, the rest of the budget is not burnt
    # (two mappings reach no drop at all; six reach about 50 points)
    target = AuditOptions(budget_s=600, mde_points=100, **{**SMALL, "mappings": (6, 16)})
    plan, candidate = _sized(target, 13.7 * per_mapping)
    assert candidate.options.n_mappings == 6 and plan.planned_mde["points"] <= 100


@pytest.mark.slow
def test_the_bound_is_the_verdicts_and_a_budget_that_cannot_reach_it_stops_before_scoring(tmp_path):
    scorer = InductionScorer()
    # a budget that buys no design reaching a 1-point MDE: said before scoring, with what it buys, and stopped
    lines = []
    with pytest.raises(AuditError, match=r"no lookup design within the budget reaches an MDE of 1 points: it buys"):
        run_audit(scorer, AuditOptions(budget_s=600, mde_points=1, **SMALL), tmp_path / "s", echo=lines.append)
    assert not (tmp_path / "s" / "lookup.json").exists() and not any(c.startswith("plan lookup") for c in lines)
    # told to go on, it scores, and the verdict reads the bound given: inconclusive, never a clean null
    anyway = run_audit(
        scorer,
        AuditOptions(budget_s=600, mde_points=1, anyway=True, **SMALL),
        tmp_path / "a",
        echo=lines.append,
        progress=False,
    )
    assert anyway.verdict.startswith("inconclusive: could miss a weak phase of")  # up to X points, or any size
    assert anyway.probe_result().phase_test["max_mde_points"] == 1
    assert any(line.startswith("warning: no lookup design within the budget") for line in lines)
    # a looser bound with a budget: passed to the probe as its verdict's bound
    loose = run_audit(
        scorer, AuditOptions(budget_s=600, mde_points=100, **SMALL), tmp_path / "l", echo=print, progress=False
    )
    assert loose.probe_result().phase_test["max_mde_points"] == 100


def test_one_period_rule_says_why_for_every_command(qwen_dir):
    assert default_period(None, None, 8).reason == "period 4: the model has no compression grid; half the modulus 8"
    assert default_period(None, 8, 24, PRESS_GRID).reason == "period 8: the press's chunk grid"
    assert default_period(3, 8, 24).reason == "period 3: --stride 3"
    stuck = default_period(None, 16, 8)
    assert (stuck.value, stuck.stride) == (16, None) and "not below the modulus 8" in stuck.reason
    assert default_period(1, None, 8).value == 8  # a period below 2 has no phase
    # a dry run tests the period the run would: the press's grid is read from its spec, the model's from its config
    runner = CliRunner()
    plain = runner.invoke(app, ["eval", "lookup", str(qwen_dir), "--dry-run"])
    assert plain.exit_code == 0, plain.output
    assert "period 12: the model has no compression grid; half the modulus 24" in plain.output
    pressed = runner.invoke(app, ["eval", "lookup", str(qwen_dir), "--press", "chunkkv8", "--dry-run"])
    assert pressed.exit_code == 0, pressed.output
    assert "period 8: the press's chunk grid; phase verdict" in pressed.output


@pytest.mark.slow
def test_an_audit_prints_and_records_its_period_with_its_reason(tmp_path):
    lines = []
    audit = run_audit(
        InductionScorer(),
        AuditOptions(budget_s=600, anyway=True, **{**SMALL, "mappings": (2,)}),
        tmp_path / "p",
        echo=lines.append,
        progress=False,
    )
    reason = "period 4: the model has no compression grid; half the modulus 8"
    assert lines[0] == reason and audit.period["reason"] == reason and reason in audit.summary
    lookup = audit.probe_result()
    assert lookup.period == audit.period and lookup.phase_test["period"] == 4 and reason in lookup.summary
