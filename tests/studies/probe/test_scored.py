"""Scoring a prompt set without a model: the chunks it is scored in, the plan printed before it, the per-prompt
arrays and layout checks it keeps, the per-prompt records, and the position controls a result states."""

import numpy as np
import pytest

from phasekv.scoring.answers import AnswerScores
from phasekv.studies.probe import scored
from phasekv.studies.probe.scored import (
    PromptScores,
    chunk_size,
    plan_prompt_set,
    position_controls,
    prompt_chunks,
    score_prompt_set,
)
from phasekv.tasks.prompts import Prompt

KEY = 2  # key tokens at t_K


def _prompt(t: int, answer=(7, 8), *, query=None, length=12, key_at_end=True, answer_after_key=True, **labels):
    """A stand-in prompt of `length` tokens (ids 100 + i) with a 2-token key at t_K = `t`, the answer right after
    the key (unless `answer_after_key` is False) and the key repeated at the end (unless `key_at_end` is False);
    the query position is the last index unless given."""
    ids = [100 + i for i in range(length)]
    if answer_after_key:
        ids[t + KEY : t + KEY + len(answer)] = answer
    if key_at_end:
        ids[-KEY:] = ids[t : t + KEY]
    query = length - 1 if query is None else query
    fields = {"residue": t % 4, "unit": 0, "placement": 0} | labels
    return Prompt(input_ids=ids, answer_ids=list(answer), target_position=t, query_position=query, **fields)


class _Endpoint:
    """A scorer that scores answers itself (one request per prompt, like an endpoint): an answer is correct when
    its first token is even, its log-prob is minus the context length. Records each call."""

    batch_size = 2

    def __init__(self):
        self.calls = []

    def score_answers(self, contexts, answers, **kwargs):
        self.calls.append((len(contexts), kwargs))
        if "progress" in kwargs:
            kwargs["progress"](len(contexts))
        return AnswerScores(
            logprob=np.array([-float(len(c)) for c in contexts]),
            correct=np.array([a[0] % 2 == 0 for a in answers]),
            first_argmax=np.zeros(len(contexts), dtype=np.int64),
        )


class _Bar:
    """Stands in for the progress bar: records the plan, the description, the rows and the close."""

    made = []

    def __init__(self, plan, desc):
        self.plan, self.desc, self.rows, self.closed = plan, desc, [], False
        _Bar.made.append(self)

    def __call__(self, rows):
        self.rows.append(rows)

    def close(self):
        self.closed = True


# ---------- chunks ----------


def test_a_chunk_is_the_larger_of_a_prompt_count_and_sixteen_batches(monkeypatch):
    assert chunk_size(4) == 4096 and chunk_size(300) == 16 * 300
    monkeypatch.setattr(scored, "CHUNK_PROMPTS", 3)
    assert chunk_size(2) == 32 and chunk_size(0) == 3


def test_the_chunks_cover_the_prompts_once_in_order(monkeypatch):
    monkeypatch.setattr(scored, "CHUNK_PROMPTS", 1)
    monkeypatch.setattr(scored, "CHUNK_BATCHES", 2)  # chunks of 2 x batch size 2 = 4 prompts
    prompts = list("abcdefghij")
    assert list(prompt_chunks(prompts, 2)) == [(0, list("abcd")), (4, list("efgh")), (8, list("ij"))]
    assert list(prompt_chunks(prompts[:4], 2)) == [(0, list("abcd"))]
    assert list(prompt_chunks([], 2)) == []


# ---------- the plan ----------


def _design_prompts():
    """Nine prompts: residues {1, 2, 3}, units {0, 1}, placements {0, 1, 2}, query positions {11, 13}; the first
    one given again at the end and the third again as the sixth (identical prompts), one with a 3-token answer,
    one 14 tokens long."""
    p = [
        _prompt(5, residue=1, unit=0, placement=0),
        _prompt(6, residue=2, unit=0, placement=1),
        _prompt(7, residue=3, unit=1, placement=2),
        _prompt(5, (6, 8, 9), residue=1, unit=1, placement=0),
        _prompt(6, length=14, residue=2, unit=1, placement=1),
        _prompt(7, residue=3, unit=0, placement=2),
        _prompt(4, residue=1, unit=0, placement=1),
        _prompt(3, residue=2, unit=1, placement=0),
    ]
    return [*p, p[0]]


DESIGN = {
    "residue groups": 3,
    "units": 2,
    "placements per unit and residue": 3,
    "query positions": "11, 13",
}


def test_the_plan_counts_prompts_rows_batches_and_the_design_over_the_chunks(monkeypatch):
    monkeypatch.setattr(scored, "CHUNK_PROMPTS", 1)
    monkeypatch.setattr(scored, "CHUNK_BATCHES", 2)  # chunks of 4 prompts at batch size 2: [0-3], [4-7], [8]
    plan = plan_prompt_set(_design_prompts(), 2)
    # chunk 1: 4 distinct, answers of 2, 2, 2, 3 tokens -> 2 + 1 batches; chunk 2: 4 distinct of 2 tokens -> 2;
    # chunk 3: the repeated first prompt -> 1 (identical prompts are one row only within a chunk)
    assert (plan.n_prompts, plan.n_rows, plan.n_batches, plan.batch_size) == (9, 9, 6, 2)
    assert plan.longest == 14 + 2 - 1  # the context and all but the last answer token
    assert plan.requests is False
    assert plan.design == DESIGN
    assert plan_prompt_set(_design_prompts(), 2, requests=True).requests is True

    monkeypatch.setattr(scored, "CHUNK_BATCHES", 16)  # one chunk: the repeated prompts (0 and 8, 2 and 5) are rows
    plan = plan_prompt_set(_design_prompts(), 3)  # 6 distinct of 2 answer tokens -> 2 batches, 1 of 3 -> 1
    assert (plan.n_prompts, plan.n_rows, plan.n_batches, plan.batch_size) == (9, 7, 2 + 1, 3)
    assert plan.design == DESIGN


# ---------- scoring ----------


def test_scoring_keeps_each_prompts_scores_labels_checks_and_identity_across_chunks(monkeypatch):
    monkeypatch.setattr(scored, "CHUNK_PROMPTS", 1)
    monkeypatch.setattr(scored, "CHUNK_BATCHES", 2)  # chunks of 4 prompts at batch size 2
    prompts = [
        _prompt(5, (6, 8), residue=1, unit=0, placement=0),
        _prompt(6, (7, 8), residue=2, unit=1, placement=1),
        _prompt(5, (6, 8), answer_after_key=False, residue=1, unit=0, placement=2),
        _prompt(4, (8, 9), key_at_end=False, residue=0, unit=1, placement=0),
        _prompt(5, (6, 8), residue=1, unit=0, placement=0),  # the first prompt again, in the second chunk
        _prompt(3, (4, 5), query=10, length=13, residue=3, unit=2, placement=1),  # the query is not the last index
    ]
    scorer = _Endpoint()
    got = score_prompt_set(scorer, prompts, KEY, "needle", progress=False)
    assert [n for n, _ in scorer.calls] == [4, 2] and all(kwargs == {} for _, kwargs in scorer.calls)
    expected = {
        "correct": [True, False, True, True, True, True],  # first answer token even
        "logprob": [-12.0, -12.0, -12.0, -12.0, -12.0, -13.0],
        "residue": [1, 2, 1, 0, 1, 3],
        "unit": [0, 1, 0, 1, 0, 2],
        "placement": [0, 1, 2, 0, 0, 1],
        "target_position": [5, 6, 5, 4, 5, 3],
        "query_position": [11, 11, 11, 11, 11, 10],
        "answer_follows_key": [True, True, False, True, True, True],
        "query_repeats_key": [True, True, True, False, True, False],
        "prompt_id": [0, 1, 2, 3, 0, 4],
    }
    for name, values in expected.items():
        array = getattr(got, name)
        assert array.tolist() == values, name
        assert array.dtype == np.asarray(values).dtype, name  # bool flags, integer labels and ids, float log-probs

    assert got.records("haystack") == {
        "unit": "haystack",
        "n": 6,
        "columns": {
            "target_position": expected["target_position"],
            "query_position": expected["query_position"],
            "residue": expected["residue"],
            "unit": expected["unit"],
            "placement": expected["placement"],
            "correct": expected["correct"],
            "answer_logprob": expected["logprob"],
            "prompt_id": expected["prompt_id"],  # identical prompts, so that a verdict can be recomputed
        },
    }


def test_the_layout_checks_read_the_key_the_answer_and_the_query(monkeypatch):
    def checks(prompt, key_length=KEY):
        got = score_prompt_set(_Endpoint(), [prompt], key_length, "lookup", progress=False)
        return bool(got.answer_follows_key[0]), bool(got.query_repeats_key[0])

    ids = [100, 101, 42, 43, 7, 8, 104, 105, 42, 43]  # key 42 43 at t_K = 2, answer 7 8 after it, key at the end
    good = Prompt(ids, [7, 8], target_position=2, query_position=9, residue=2, unit=0, placement=0)
    assert checks(good) == (True, True)
    # the key is 7 8 at t_K = 4: the answer 42 43 sits before it, not after, and the prompt ends with 8 104
    assert checks(Prompt([100, 101, 42, 43, 7, 8, 104], [42, 43], 4, 6, 0, 0, 0)) == (False, False)
    assert checks(Prompt(ids, [7, 9], 2, 9, 2, 0, 0)) == (False, True)  # a wrong second answer token
    assert checks(Prompt(ids, [7, 8], 2, 8, 2, 0, 0)) == (True, False)  # the query is not the last index
    assert checks(Prompt([*ids, 99], [7, 8], 2, 10, 2, 0, 0)) == (True, False)  # the prompt does not end with the key
    assert checks(Prompt(ids[:-1], [43, 7], 2, 8, 2, 0, 0), key_length=1) == (True, True)  # a one-token key 42
    # a one-token key read from the front (ids[1:]) would not equal [43]
    assert checks(Prompt([43, 5, 43], [5], 0, 2, 0, 0, 0), key_length=1) == (True, True)


def test_a_callable_progress_gets_the_rows_of_every_batch(monkeypatch):
    monkeypatch.setattr(scored, "CHUNK_PROMPTS", 1)
    monkeypatch.setattr(scored, "CHUNK_BATCHES", 2)
    rows, scorer = [], _Endpoint()
    score_prompt_set(scorer, _design_prompts(), KEY, "needle", progress=rows.append)
    assert rows == [4, 4, 1]
    assert all(kwargs == {"progress": rows.append} for _, kwargs in scorer.calls)


@pytest.mark.parametrize("given", [{}, {"progress": True}])
def test_by_default_the_plan_is_shown_and_a_bar_moves_and_closes(monkeypatch, given):
    monkeypatch.setattr(scored, "CHUNK_PROMPTS", 1)
    monkeypatch.setattr(scored, "CHUNK_BATCHES", 2)
    monkeypatch.setattr(scored, "ScoringProgress", _Bar)
    _Bar.made.clear()
    scorer = _Endpoint()
    score_prompt_set(scorer, _design_prompts(), KEY, "needle", **given)
    (bar,) = _Bar.made
    assert bar.desc == "needle" and bar.rows == [4, 4, 1] and bar.closed
    plan = bar.plan  # one request per prompt through the endpoint; batches counted as for a model
    assert (plan.n_prompts, plan.n_rows, plan.n_batches, plan.batch_size, plan.longest) == (9, 9, 6, 2, 15)
    assert plan.requests is True and plan.design == DESIGN
    assert all(kwargs == {"progress": bar} for _, kwargs in scorer.calls)

    _Bar.made.clear()
    score_prompt_set(scorer, _design_prompts(), KEY, "needle", progress=False)
    assert _Bar.made == []


# ---------- position controls ----------


def _scores(target, residue, query, follows=None, repeats=None) -> PromptScores:
    n = len(target)
    ones = np.ones(n, bool)
    return PromptScores(
        correct=ones,
        logprob=np.zeros(n),
        residue=np.array(residue),
        unit=np.zeros(n, np.int64),
        placement=np.zeros(n, np.int64),
        target_position=np.array(target),
        query_position=np.array(query),
        answer_follows_key=ones if follows is None else np.array(follows),
        query_repeats_key=ones if repeats is None else np.array(repeats),
        prompt_id=np.arange(n),
    )


def test_the_position_controls_compare_the_groups_moments_exactly():
    # M = 4: residue 1 at t_K 5, 13 (mean 9, variance 16), residue 2 at 6, 14 (mean 10, variance 16)
    rows, checks = position_controls(_scores([13, 6, 5, 14], [1, 2, 1, 2], [40] * 4), 4)
    assert rows == [
        {"residue": 1, "count": 2, "mean_target_position": 9.0, "var_target_position": 16.0, "query_position": 40},
        {"residue": 2, "count": 2, "mean_target_position": 10.0, "var_target_position": 16.0, "query_position": 40},
    ]
    assert checks == {
        "query_position_fixed": True,
        "query_positions": [40],
        "equal_mean_target_position": False,
        "equal_var_target_position": True,
        "equal_group_sizes": True,
        "target_at_residue": True,
        "answer_follows_key": True,
        "query_repeats_key": True,
    }
    # M = 8: residue 1 at 1, 17 and residue 9 at 9, 9 (t_K mod 8 is 1, not 9), both of mean 9
    rows, checks = position_controls(_scores([1, 17, 9, 9], [1, 1, 9, 9], [30] * 4), 8)
    assert [row["mean_target_position"] for row in rows] == [9.0, 9.0]
    assert checks["equal_mean_target_position"] is True and checks["equal_var_target_position"] is False
    assert checks["target_at_residue"] is False


def test_the_position_controls_flag_moving_queries_unequal_groups_and_bad_layouts():
    # residue 0 at 4, 8, 12 (mean 8), residue 1 at 9, 5 (mean 7): three prompts against two; queries at 30 and 31
    scores = _scores([4, 8, 12, 9, 5], [0, 0, 0, 1, 1], [31, 30, 30, 31, 30], [True, False, True, True, True])
    rows, checks = position_controls(scores, 4)
    assert [(row["residue"], row["count"], row["query_position"]) for row in rows] == [(0, 3, 30), (1, 2, 30)]
    assert checks == {
        "query_position_fixed": False,
        "query_positions": [30, 31],
        "equal_mean_target_position": False,
        "equal_var_target_position": False,
        "equal_group_sizes": False,
        "target_at_residue": True,
        "answer_follows_key": False,
        "query_repeats_key": True,
    }
    # three query positions, and a prompt that does not end with its key
    _, checks = position_controls(_scores([4, 5, 6], [0, 1, 2], [7, 8, 9], repeats=[True, True, False]), 4)
    assert checks["query_position_fixed"] is False and checks["query_positions"] == [7, 8, 9]
    assert checks["equal_group_sizes"] is True and checks["query_repeats_key"] is False
    assert checks["answer_follows_key"] is True
    # two groups of two and one of one: two sizes
    _, checks = position_controls(_scores([4, 4, 5, 5, 6], [0, 0, 1, 1, 2], [9] * 5), 4)
    assert checks["equal_group_sizes"] is False
