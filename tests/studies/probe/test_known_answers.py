"""The measuring side against numbers known by construction: answer scoring on scorers whose log-probs are
written by hand, and the lookup and needle probes end to end on a stand-in that answers by induction (copy
what followed the query's key in the context) except at one planted phase, so every per-residue accuracy,
every fold entry and every position control has a value computed here from the prompts alone."""

import numpy as np
import pytest
import torch

from phasekv.results.record import prompt_prefix
from phasekv.scoring import ScorerError, score_answers
from phasekv.studies.probe.run import run_lookup, run_needle
from phasekv.tasks.lookup import LookupOptions, lookup_prompts
from phasekv.tasks.needle import NeedleOptions, needle_prompts
from phasekv.tasks.tokenizer import build_word_tokenizer

TOKENIZER = build_word_tokenizer()
V = len(TOKENIZER)
SURE = 9.0  # logit of the token a stand-in predicts; every other token has logit 0


def _row(token: int) -> torch.Tensor:
    logits = torch.zeros(V)
    logits[token] = SURE
    return torch.log_softmax(logits, -1)


SURE_LP = float(_row(0)[0])  # log-prob of the predicted token
OTHER_LP = float(_row(0)[1])  # log-prob of any other token


class CountingModel:
    """Predicts previous token + 1 (mod V) at every position: the greedy continuation of [..., c] is c+1, c+2, ..."""

    batch_size, compression_stride, tokenizer = 4, None, TOKENIZER

    def logprobs(self, sequences, n_last=1):
        return torch.stack(
            [torch.stack([_row((s[len(s) - n_last + j] + 1) % V) for j in range(n_last)]) for s in sequences]
        )


def test_a_multi_token_answer_is_correct_only_when_every_token_is_the_argmax():
    contexts = [[3, 4, 10]] * 5
    answers = [[11, 12, 13], [11, 12, 99], [11, 50, 51], [40, 41, 42], [11]]
    scores = score_answers(CountingModel(), contexts, answers)
    # first token right, a later one wrong: wrong (greedy decoding would not produce the answer)
    assert scores.correct.tolist() == [True, False, False, False, True]
    # teacher forced: after a wrong token the model predicts from the token it was given (50 -> 51 is the argmax)
    expected = [3 * SURE_LP, 2 * SURE_LP + OTHER_LP, SURE_LP + OTHER_LP + SURE_LP, OTHER_LP + 2 * SURE_LP, SURE_LP]
    np.testing.assert_allclose(scores.logprob, expected, rtol=1e-6)
    assert scores.first_argmax.tolist() == [11] * 5


def test_answer_scoring_passes_progress_on_defers_to_a_scorer_that_scores_answers_and_checks_its_input():
    calls = []

    class Reporting(CountingModel):
        def logprobs(self, sequences, n_last=1, progress=None):
            progress(len(sequences))
            return super().logprobs(sequences, n_last)

    scores = score_answers(Reporting(), [[1], [2], [1]], [[2], [3, 4], [2]], progress=calls.append)
    assert sorted(calls) == [1, 1] and scores.correct.tolist() == [True, True, True]  # one call per answer length
    assert score_answers(CountingModel(), [[1]], [[2]]).correct.tolist() == [True]  # no bar: none passed on

    class Itself(CountingModel):
        def score_answers(self, contexts, answers, progress=None):
            return ("scored by the scorer", contexts, answers, progress)

    assert score_answers(Itself(), [[1]], [[2]], progress=print) == ("scored by the scorer", [[1]], [[2]], print)
    empty = score_answers(CountingModel(), [], [])
    assert empty.correct.shape == empty.logprob.shape == (0,)
    with pytest.raises(ScorerError, match="^2 contexts but 1 answers$"):
        score_answers(CountingModel(), [[1], [2]], [[3]])
    with pytest.raises(ScorerError, match="^an answer is empty$"):
        score_answers(CountingModel(), [[1]], [[]])


def test_answer_scores_are_booleans_and_token_ids_and_read_narrow_token_ids():
    # [3, 4, 10] + [11, 12]: 11 and 12 are the argmax (2 sure log-probs); [7] + [9]: the argmax is 8, so wrong
    contexts, answers = [[3, 4, 10], [7]], [[11, 12], [9]]
    for ids in (list, lambda s: np.array(s, dtype=np.uint16)):  # a tokenized corpus stores ids as uint16
        scores = score_answers(CountingModel(), [ids(c) for c in contexts], [ids(a) for a in answers])
        # the record's "correct" column and the model's top-1 token ids, as the endpoint scorer returns them
        assert scores.correct.dtype == np.bool_ and scores.first_argmax.dtype == np.int64
        assert scores.correct.tolist() == [True, False] and scores.first_argmax.tolist() == [11, 8]
        np.testing.assert_allclose(scores.logprob, [2 * SURE_LP, OTHER_LP], rtol=1e-6)


class InductionModel:
    """A stand-in that answers a retrieval prompt by construction: at each answer position it copies the token
    that followed the query's key (the context's last `key_length` tokens) where that key occurs earlier in the
    context. At a target key position t_K with t_K mod `period` == `weak_phase` it gets answer token `wrong_token`
    wrong (predicts the next id instead), so its accuracy by phase is known before any prompt is scored."""

    batch_size, compression_stride, tokenizer = 16, None, TOKENIZER

    def __init__(self, key_length, weak_phase=3, period=8, wrong_token=0):
        self.key_length, self.weak_phase, self.period, self.wrong_token = key_length, weak_phase, period, wrong_token

    def target_position(self, context):
        key, k = list(context[-self.key_length :]), self.key_length
        found = [t for t in range(len(context) - k) if list(context[t : t + k]) == key]
        assert len(found) == 1, f"the query's key occurs {len(found)} times before the query"
        return found[0]

    def logprobs(self, sequences, n_last=1):
        out = []
        for seq in sequences:
            context = seq[: len(seq) - n_last + 1]
            t_k = self.target_position(context)
            rows = []
            for j in range(n_last):
                token = seq[t_k + self.key_length + j]
                if t_k % self.period == self.weak_phase and j == self.wrong_token:
                    token = (token + 1) % V
                rows.append(_row(token))
            out.append(torch.stack(rows))
        return torch.stack(out)

    def describe(self):
        return {"kind": "induction stand-in"}


def _expected_by_residue(prompts, modulus, model):
    """Per-residue accuracy and the fold's successes, counted from the prompts with the stand-in's rule."""
    right = np.array([p.target_position % model.period != model.weak_phase for p in prompts])
    residues = np.array([p.target_position % modulus for p in prompts])
    accuracy = [float(right[residues == r].mean()) for r in range(modulus)]
    return right, residues, accuracy


def _check_probe(result, prompts, model, modulus, stride, key_length):
    right, residues, accuracy = _expected_by_residue(prompts, modulus, model)
    summary = result["summary"]
    assert summary["accuracy"] == pytest.approx(accuracy, abs=1e-12)
    assert summary["successes"] == [int(right[residues == r].sum()) for r in range(modulus)]
    assert summary["counts"] == [int((residues == r).sum()) for r in range(modulus)]
    assert summary["mean"] == pytest.approx(np.mean(accuracy)) and summary["worst_residue"] == model.weak_phase
    assert summary["gap_points"] == pytest.approx(100.0)
    fold = summary["fold"]
    phases = residues % stride
    assert fold["phase"] == list(range(stride))
    assert fold["successes"] == [int(right[phases == p].sum()) for p in range(stride)]
    assert fold["accuracy"] == pytest.approx([right[phases == p].mean() for p in range(stride)])
    diff = np.mean([abs(accuracy[r] - accuracy[r + stride]) for r in range(modulus - stride)])  # no wrap-around
    assert summary["period_difference_points"] == pytest.approx(100 * diff)
    # the position controls, recomputed from the prompts rather than read off the result's own flags
    positions = {r: np.array([p.target_position for p in prompts if p.residue == r]) for r in range(modulus)}
    assert {p.target_position % modulus == p.residue for p in prompts} == {True}
    assert len({round(t.mean() * len(t)) for t in positions.values()}) == 1  # equal sums = equal means (equal sizes)
    assert len({len(t) for t in positions.values()}) == 1 and len({int((t**2).sum()) for t in positions.values()}) == 1
    for row in result["position_stats"]:
        t = positions[row["residue"]]
        assert row["mean_target_position"] == pytest.approx(t.mean()) and row["count"] == len(t)
        assert row["var_target_position"] == pytest.approx(t.var())
    assert result["controls"]["query_positions"] == sorted({p.query_position for p in prompts})
    assert all(p.input_ids[p.target_position + key_length :][: len(p.answer_ids)] == p.answer_ids for p in prompts)
    assert result["controls"]["target_at_residue"] and result["controls"]["equal_var_target_position"]
    cells = np.array(result["cell_accuracy"])
    assert cells.shape == (result["aggregation"]["n_rows"], modulus)
    np.testing.assert_allclose(cells.mean(axis=0), accuracy)


NEEDLE = NeedleOptions(context_length=200, n_records=6, n_haystacks=3, modulus=8, spread_blocks=1, seed=5)


@pytest.mark.parametrize("wrong_token", [0, 1])
def test_needle_probe_returns_the_accuracy_by_phase_of_a_model_built_to_have_it(wrong_token):
    """Two-token values: wrong on the second value token alone must count as wrong, like wrong on the first."""
    prompt_set = needle_prompts(TOKENIZER, NEEDLE, prompt_prefix(TOKENIZER))
    key_length = prompt_set.options["answer_offset"]
    model = InductionModel(key_length, wrong_token=wrong_token)
    result = run_needle(model, NEEDLE, stride=4, n_resamples=50, progress=False)
    prompts = list(needle_prompts(TOKENIZER, NEEDLE, prompt_prefix(TOKENIZER)).prompts)
    assert len(prompts) == result["n_prompts"] and all(len(p.answer_ids) == 2 for p in prompts)
    _check_probe(result, prompts, model, NEEDLE.modulus, 4, key_length)


LOOKUP = LookupOptions(n_records=12, n_demos=3, modulus=8, n_mappings=3, seed=2)


def test_lookup_probe_returns_the_accuracy_by_phase_of_a_model_built_to_have_it():
    model = InductionModel(key_length=1)
    result = run_lookup(model, LOOKUP, stride=4, n_resamples=50, progress=False)
    prompts = list(lookup_prompts(TOKENIZER, LOOKUP, prompt_prefix(TOKENIZER)).prompts)
    assert len(prompts) == result["n_prompts"]
    _check_probe(result, prompts, model, LOOKUP.modulus, 4, 1)
