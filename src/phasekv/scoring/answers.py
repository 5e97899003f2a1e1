"""Teacher-forced scoring of (possibly multi-token) answers.

For a context c and an answer a_1..a_k the scorer reads the log-probs at the last k positions of
c + a_1..a_{k-1}: position j predicts a_j given c and the previous answer tokens. An answer is
correct when every a_j is the full-vocabulary top-1 (argmax) at its position, which is exactly
"greedy decoding produces the whole answer".

Identical (context, answer) pairs are scored once: the prefix padding protocol places a mapping
at few distinct positions, so a lookup run holds many repeated prompts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from .base import Scorer, ScorerError


@dataclass(frozen=True)
class AnswerScores:
    """Scores of N answers: `logprob` [N] (sum over the answer's tokens), `correct` [N] (every
    token top-1), `first_argmax` [N] (the full-vocabulary top-1 token id at the first answer
    position, i.e. the model's own next-token choice after the context)."""

    logprob: np.ndarray
    correct: np.ndarray
    first_argmax: np.ndarray


def score_answers(scorer: Scorer, contexts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]]) -> AnswerScores:
    """Teacher-forced scores of answers[i] after contexts[i]; distinct pairs of equal answer
    length are scored together (one `scorer.logprobs` call per answer length)."""
    if len(contexts) != len(answers):
        raise ScorerError(f"{len(contexts)} contexts but {len(answers)} answers")
    if hasattr(scorer, "score_answers"):  # a scorer that scores answers itself (EndpointScorer: one echo request each)
        return scorer.score_answers(contexts, answers)
    index: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
    keys = [(tuple(c), tuple(a)) for c, a in zip(contexts, answers, strict=True)]
    pair_of = np.array([index.setdefault(key, len(index)) for key in keys], dtype=np.int64)
    pairs = list(index)
    n = len(pairs)
    logprob, correct, first = np.zeros(n), np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int64)
    by_length: dict[int, list[int]] = {}
    for i, (_, answer) in enumerate(pairs):
        if not answer:
            raise ScorerError("an answer is empty")
        by_length.setdefault(len(answer), []).append(i)
    for k, rows in by_length.items():
        sequences = [[*pairs[i][0], *pairs[i][1][:-1]] for i in rows]
        lp = scorer.logprobs(sequences, k)  # [n_k, k, V]
        target = torch.tensor([pairs[i][1] for i in rows], dtype=torch.long)  # [n_k, k]
        top = lp.argmax(dim=-1)
        logprob[rows] = lp.gather(-1, target[..., None])[..., 0].sum(-1).double().numpy()
        correct[rows] = (top == target).all(dim=-1).numpy()
        first[rows] = top[:, 0].numpy()
    return AnswerScores(logprob=logprob[pair_of], correct=correct[pair_of], first_argmax=first[pair_of])
