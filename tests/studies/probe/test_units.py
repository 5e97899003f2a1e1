"""The pieces of a unit probe between the scores and the statistics, without a model: the correctness cube,
the period and chance level the verdict is given, the arguments the summary and the verdict receive, and the
dry run's planned minimum detectable effect."""

import re
from dataclasses import asdict, dataclass, replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from phasekv.results.record import METRIC, SCHEMA, prompt_prefix
from phasekv.stats.verdict import MIN_EFFECT_POINTS
from phasekv.studies.probe import units
from phasekv.studies.probe.registry import get
from phasekv.studies.probe.scored import PromptScores, position_controls
from phasekv.studies.probe.units import (
    PLANNING_ACCURACY,
    chance_level,
    correctness_cube,
    phase_period,
    planned_mde,
    summarize_units,
)

N_UNITS, MODULUS, PLACEMENTS = 3, 4, 2


def _scores(cells: list[tuple[int, int, int]], correct=None) -> PromptScores:
    """Scores of one prompt per (unit, residue, placement) in `cells`; prompts 0 and 1 are identical."""
    unit, residue, placement = (np.array(c) for c in zip(*cells, strict=True))
    n = len(cells)
    correct = np.arange(n) % 3 == 0 if correct is None else np.asarray(correct)
    return PromptScores(
        correct=correct.astype(float),
        logprob=np.full(n, -1.0),
        residue=residue,
        unit=unit,
        placement=placement,
        target_position=100 + 8 * placement + residue,
        query_position=np.full(n, 200),
        answer_follows_key=np.ones(n, bool),
        query_repeats_key=np.ones(n, bool),
        prompt_id=np.r_[0, np.arange(n - 1)],
    )


FULL = [(i, r, p) for i in range(N_UNITS) for r in range(MODULUS) for p in range(PLACEMENTS)]
COVERAGE = "the prompts do not cover every (unit, residue, placement) exactly once"


def test_the_cube_holds_each_prompt_in_its_cell_and_refuses_gaps_and_repeats():
    scores = _scores(FULL)
    cube = correctness_cube(scores, N_UNITS, MODULUS, PLACEMENTS)  # [units, M, P]
    for k, (i, r, p) in enumerate(FULL):
        assert cube[i, r, p] == scores.correct[k]
    for cells in (FULL[1:], [*FULL, FULL[0]]):  # a cell missing; every cell filled and one twice
        with pytest.raises(ValueError, match=f"^{re.escape(COVERAGE)}$"):
            correctness_cube(_scores(cells), N_UNITS, MODULUS, PLACEMENTS)


@pytest.mark.parametrize(
    ("stride", "model_stride", "period"),
    [(3, 5, 3), (None, 5, 5), (None, None, 8), (2, 5, 2), (None, 2, 2), (None, 1, 8), (1, 5, 8)],
)
def test_the_period_is_the_stride_else_the_models_else_the_modulus_and_at_least_2(stride, model_stride, period):
    assert phase_period(stride, model_stride, 8) == period


@pytest.mark.parametrize(("n_records", "chance"), [(8, 0.25), (4, 0.5), (2, 0.99), (1, 0.99)])
def test_the_chance_level_is_twice_guessing_below_99_percent(n_records, chance):
    assert chance_level(n_records) == chance


class _Recorder:
    """Stands in for a statistic: records the arguments of its one call, returns `result`."""

    def __init__(self, result):
        self.result, self.args, self.kwargs = result, None, None

    def __call__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs
        return self.result


@pytest.mark.parametrize(("stride", "model_stride", "period"), [(3, 2, 3), (None, 2, 2), (None, None, MODULUS)])
def test_the_summary_and_the_verdict_get_the_runs_cells_settings_and_period(monkeypatch, stride, model_stride, period):
    summary, verdict = _Recorder("summary"), _Recorder("verdict")
    monkeypatch.setattr(units, "summarize_mappings", summary)
    monkeypatch.setattr(units, "phase_verdict", verdict)
    scores = _scores(FULL)
    common = {"stride": stride, "model_stride": model_stride, "seed": 5, "n_resamples": 7}
    cells, got_summary, got_verdict = summarize_units(
        scores, N_UNITS, MODULUS, PLACEMENTS, **common, unit="haystack", chance=0.125, min_effect=9.0
    )
    assert (got_summary, got_verdict) == ("summary", "verdict")
    np.testing.assert_array_equal(cells, correctness_cube(scores, N_UNITS, MODULUS, PLACEMENTS).mean(axis=2))
    np.testing.assert_array_equal(summary.args[0], cells)
    assert summary.kwargs == {
        "stride": stride,
        "n_resamples": 7,
        "n_permutations": 7,
        "seed": 5,
        "trials_per_cell": PLACEMENTS,
        "unit": "haystack",
    }
    assert len(verdict.args) == 4 and verdict.args[3] == period
    for given, expected in zip(verdict.args[:3], (scores.unit, scores.target_position, scores.correct), strict=True):
        assert given is expected
    assert verdict.kwargs.pop("prompt_ids") is scores.prompt_id
    assert verdict.kwargs == {
        "seed": 5, "n_resamples": 7, "chance": 0.125, "min_effect": 9.0, "mde": True, "max_mde": 20.0
    }  # fmt: skip

    summarize_units(scores, N_UNITS, MODULUS, PLACEMENTS, **common)
    assert summary.kwargs["unit"] == "mapping"
    assert verdict.kwargs["chance"] is None and verdict.kwargs["min_effect"] == MIN_EFFECT_POINTS


def _prompts(n_units: int, positions) -> list:
    """Stand-in prompts, one per (unit, position), the first one given twice."""
    prompts = [
        SimpleNamespace(unit=u, target_position=t, input_ids=[u, t], answer_ids=[1])
        for u in range(n_units)
        for t in positions
    ]
    return [prompts[0], *prompts]


def test_the_dry_run_simulates_the_mde_of_the_prompts_design_at_a_flat_accuracy(monkeypatch):
    mde = _Recorder({"points": 12.0})
    monkeypatch.setattr(units, "minimum_detectable_effect", mde)
    prompts = _prompts(3, range(100, 124))
    period, got, note = planned_mde(prompts, 3, 8, chance=chance_level(8), accuracy=0.6, min_effect=9.0)
    assert (period, got) == (3, {"points": 12.0})
    assert note == "at an assumed flat accuracy of 60%; the run states its own MDE"
    design, base, alpha, min_effect = mde.args
    assert (design.period, design.n_prompts, design.n_distinct, design.n_units) == (3, 73, 72, 3)
    np.testing.assert_array_equal(base, np.full(72, 0.6))  # one cell per distinct (unit, position)
    assert (alpha, min_effect) == (0.05, 9.0)
    assert mde.kwargs == {"basis": "a flat accuracy of 60% (assumed before the run)", "chance": 0.25}

    period, _, note = planned_mde(prompts, None, 8, chance=chance_level(8))  # the period check's default: modulus // 2
    assert period == 4 and note == "at an assumed flat accuracy of 70%; the run states its own MDE"
    assert PLANNING_ACCURACY == 0.7
    np.testing.assert_array_equal(mde.args[1], np.full(72, 0.7))
    assert mde.args[3] == MIN_EFFECT_POINTS
    assert mde.kwargs == {"basis": "a flat accuracy of 70% (assumed before the run)", "chance": 0.25}
    assert (
        planned_mde(prompts, 1, 8, chance=chance_level(8))[0] == 8
    )  # a stride of 1 has no phase: the modulus is tested


def test_the_dry_run_says_when_the_design_is_not_testable(monkeypatch):
    monkeypatch.setattr(units, "minimum_detectable_effect", _Recorder(None))
    prompts = _prompts(2, range(100, 111))  # a span of 11 positions: under 4 periods of 3
    assert planned_mde(prompts, 3, 8, chance=chance_level(8)) == (
        3,
        None,
        "not testable at this period: widen the design (more spread blocks or a larger modulus)",
    )


class _Scorer:
    """A scorer the run only asks for its tokenizer, stride and record; a stride above the modulus, and
    `grid_period` the period of its compression grid where the grid can move (else None)."""

    batch_size, compression_stride = 4, 16

    def __init__(self, grid_period: int | None):
        from phasekv.tasks.tokenizer import build_word_tokenizer

        self.tokenizer, self.grid_period = build_word_tokenizer(), grid_period

    def describe(self):
        return {"kind": "stand-in"}


@dataclass
class _Options:
    """What a unit run reads of its options (units that are not the default "mapping")."""

    n_records: int = 8
    modulus: int = MODULUS
    n_haystacks: int = N_UNITS
    seed: int = 5
    protocol: str = "prefix"


@dataclass(frozen=True)
class _Verdict:
    """A stand-in verdict: what the run reads and sets of it."""

    basis: str = ""
    shifted: object = None
    alpha: float = 0.01
    min_effect_points: float = 7.0
    chance: float = 0.125

    def to_dict(self):
        return {"verdict": 1, "basis": self.basis, **({"grid_shift": self.shifted} if self.shifted else {})}


def _rest_on_grid_shift(verdict, shifted):
    return replace(verdict, basis=f"rests on the grid shift, p = {shifted['p_value']}", shifted=shifted)


def _run(monkeypatch, grid: int | None, moves: bool = True, **run_options) -> tuple[dict, dict]:
    """run_unit_probe on stand-ins for the scoring, the statistics and the grid shift: (result, their recorders)."""
    scores = _scores(FULL)
    summary = SimpleNamespace(to_dict=lambda: {"summary": 1}, stat_interval_methods={"gap": "basic"})
    calls = {
        "score": _Recorder(scores),
        "summarize": _Recorder((np.zeros((N_UNITS, MODULUS)), summary, _Verdict())),
        "shift": _Recorder(({"moves_with_grid": moves, "p_value": 0.0123}, {"correct_grid_offset_1": scores.correct})),
    }
    monkeypatch.setattr(units, "rest_on_grid_shift", _rest_on_grid_shift)
    monkeypatch.setattr(units, "score_prompt_set", calls["score"])
    monkeypatch.setattr(units, "summarize_units", calls["summarize"])
    monkeypatch.setattr(units, "run_grid_shift", calls["shift"])
    monkeypatch.setattr(units, "grid_period", lambda scorer: scorer.grid_period)
    prompt_set = SimpleNamespace(prompts=["the prompts"], options={"answer_offset": 2, "placements_per_haystack": 2})
    scorer = _Scorer(grid)
    calls["build"] = _Recorder(prompt_set)
    probe = replace(get("needle"), prompts=calls["build"], bootstrap_unit="haystacks")
    result = units.run_unit_probe(probe, scorer, _Options(), **run_options)
    assert calls["build"].args == (scorer.tokenizer, _Options(), prompt_prefix(scorer.tokenizer))
    for recorder in (calls["score"], calls["shift"]):
        assert recorder.args is None or recorder.args[0] is scorer
    assert calls["summarize"].args[0] is scores
    return result, calls


def test_a_unit_run_passes_its_settings_on_and_says_what_the_verdict_rests_on(monkeypatch):
    result, calls = _run(monkeypatch, None, progress=True, min_effect=9.0, n_resamples=7)
    score = calls["score"]
    assert score.args[1] == ["the prompts"]
    assert score.kwargs == {"key_length": 2, "desc": "needle", "progress": True}
    summarize = calls["summarize"]
    assert summarize.args[1:] == (N_UNITS, MODULUS, 2)
    assert summarize.kwargs == {
        "stride": None,  # the model's stride 16 is not below the modulus: no period check
        "model_stride": 16,
        "seed": 5,
        "n_resamples": 7,
        "unit": "haystack",
        "chance": 0.25,
        "min_effect": 9.0,
        "max_mde": 20.0,
    }
    assert result["phase_test"] == {"verdict": 1, "basis": units.BLACK_BOX}
    assert calls["shift"].args is None
    scores = calls["summarize"].args[0]
    position_stats, controls = position_controls(scores, MODULUS)
    assert {k: v for k, v in result.items() if k not in ("software", "started_at", "wall_time_s")} == {
        "schema": SCHEMA,
        "probe": "needle",
        "model": {"kind": "stand-in"},
        "scoring": {
            "metric": METRIC,
            "batch_size": 4,
            "threads": torch.get_num_threads(),
            "workers": 1,
            "prompt_prefix_ids": prompt_prefix(_Scorer(None).tokenizer),
        },
        "protocol": "prefix",
        "seed": 5,
        "options": {**asdict(_Options()), "answer_offset": 2, "placements_per_haystack": 2},
        "requested_options": asdict(_Options()),
        "n_prompts": len(FULL),
        "stride": {"value": None, "source": "the model's compression stride 16 is not below modulus 4"},
        "period": {
            "value": 16,
            "stride": None,
            "reason": "period 16: the model's compression stride (not below the modulus 4: no period check)",
        },
        "aggregation": {
            "cell": "mean over the placements of one haystack in one residue group (cell_accuracy)",
            "bootstrap_unit": "haystacks",
            "permutation": "residue labels of the cells shuffled within each haystack",
            "counts": "prompts = haystacks x placements per residue",
            "intervals": {"per_residue": "percentile bootstrap over haystacks", "gap": "basic"},
            "n_haystacks": N_UNITS,
            "placements_per_haystack": 2,
            "n_rows": N_UNITS,
        },
        "summary": {"summary": 1},
        "phase_test": {"verdict": 1, "basis": units.BLACK_BOX},
        "position_stats": position_stats,
        "controls": controls,
        "cell_accuracy": np.zeros((N_UNITS, MODULUS)).tolist(),
        "mean_answer_logprob": -1.0,
        "prompt_records": scores.records("haystack"),
    }

    result, calls = _run(monkeypatch, None, stride=3)  # the defaults, and a stride given
    assert result["stride"] == {"value": 3, "source": "option"}
    assert calls["summarize"].kwargs["stride"] == 3 and calls["summarize"].kwargs["n_resamples"] == 2000
    assert calls["score"].kwargs["progress"] is True and calls["summarize"].kwargs["min_effect"] == MIN_EFFECT_POINTS
    refusal = (
        "the grid shift (grid_shift, --grid-shift) needs a model whose compression grid can move (a phasekv model "
        "with a compressed KV "
        "cache, a pool: press, or a kvpress press with a chunk grid: ChunkKVPress, ChunkPress, BlockPress); "
        "for other models the verdict rests on the position design alone"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(refusal)}$"):
        _run(monkeypatch, None, grid_shift=True)

    result, _ = _run(monkeypatch, 4)
    movable = "position design (the grid can move: run with --grid-shift for the causal test)"
    assert result["phase_test"]["basis"] == movable

    result, calls = _run(monkeypatch, 4, grid_shift=True, progress=False)
    assert calls["shift"].args[1:] == (["the prompts"], 2)
    unshifted = calls["shift"].kwargs.pop("unshifted")
    assert calls["shift"].kwargs == {
        "seed": 5,
        "progress": False,
        "n_resamples": 2000,
        "alpha": 0.01,  # the verdict's rule, for the grid shift's own MDE
        "min_effect": 7.0,
        "chance": 0.125,
    }
    assert unshifted is calls["score"].result  # the grid in place is not scored again
    assert result["phase_test"] == {
        "verdict": 1,
        "grid_shift": {"moves_with_grid": True, "p_value": 0.0123},
        "basis": "rests on the grid shift, p = 0.0123",
    }
    assert result["prompt_records"] == scores.records("haystack", {"correct_grid_offset_1": scores.correct})
