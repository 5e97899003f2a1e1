"""Teacher-forced scoring of (possibly multi-token) answers.

For a context c and an answer a_1..a_k the scorer reads the log-probs at the last k positions of
c + a_1..a_{k-1}: position j predicts a_j given c and the previous answer tokens. An answer is
correct when every a_j is the full-vocabulary top-1 (argmax) at its position, which is exactly
"greedy decoding produces the whole answer".

Identical (context, answer) pairs are scored once: the prefix padding protocol places a mapping
at few distinct positions, so a lookup run holds many repeated prompts.

A scorer may carry an `answer_cache` (`CachedAnswers`; the command line gives a local model one, see
`phasekv.cli.scoring`). Pairs found there are not scored again, and every scored pair is put there as soon as
its slice of `CACHED_BATCHES` batches is scored, so a run stopped part way (a full disk, an interruption)
resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
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


Pair = tuple[tuple[int, ...], tuple[int, ...]]
Progress = Callable[[int], None]  # called with the number of sequences just scored


def distinct_pairs(
    contexts: Sequence[Sequence[int]], answers: Sequence[Sequence[int]]
) -> tuple[list[Pair], np.ndarray]:
    """(the distinct (context, answer) pairs in first-seen order, pair_of [N]: each input's index
    among them). Identical pairs are one forward row (one request through an endpoint)."""
    if len(contexts) != len(answers):
        raise ScorerError(f"{len(contexts)} contexts but {len(answers)} answers")
    index: dict[Pair, int] = {}
    keys = [(tuple(c), tuple(a)) for c, a in zip(contexts, answers, strict=True)]
    pair_of = np.array([index.setdefault(key, len(index)) for key in keys], dtype=np.int64)
    return list(index), pair_of


def pair_key(pair: Pair) -> str:
    """The answer cache's key of one (context, answer) pair."""
    return hashlib.sha256(json.dumps([list(pair[0]), list(pair[1])], separators=(",", ":")).encode()).hexdigest()


CACHED_BATCHES = 8  # batches (per worker) scored between two writes of the answer cache


class CachedAnswers:
    """A scorer's answer cache: `store` (a `phasekv.serve.cache.ResultCache`, whose header is the fingerprint of
    what produced the answers) holds [log-prob, correct, first argmax] by `pair_key`; counts what this process
    found there and what it scored."""

    KIND = "scored"  # the store's kind of these answers

    def __init__(self, store):
        self.store = store
        self.from_cache = 0
        self.scored = 0

    @property
    def notice(self) -> str | None:
        """What loading the file repaired (a torn last line), for the user."""
        return self.store.notice

    def found(self, keys: Sequence[str]) -> dict[int, list]:
        """{index in `keys`: cached answer} of the keys the cache holds."""
        known = {i: answer for i, key in enumerate(keys) if (answer := self.store.get(key)) is not None}
        self.from_cache += len(known)
        return known

    def put(self, answers: Sequence[tuple[str, list]]) -> None:
        """Keep (key, [log-prob, correct, first argmax]) answers (appended to the file in one write)."""
        self.store.put_many([(key, self.KIND, answer) for key, answer in answers])
        self.scored += len(answers)

    def describe(self) -> dict:
        path = self.store.path
        return {"from_cache": self.from_cache, "scored": self.scored, "cache": None if path is None else str(path)}


def rows_by_answer_length(pairs: Sequence[Pair]) -> dict[int, list[int]]:
    """Indices of `pairs` grouped by answer length: one `scorer.logprobs` call per group."""
    by_length: dict[int, list[int]] = {}
    for i, (_, answer) in enumerate(pairs):
        if not answer:
            raise ScorerError("an answer is empty")
        by_length.setdefault(len(answer), []).append(i)
    return by_length


def score_answers(
    scorer: Scorer,
    contexts: Sequence[Sequence[int]],
    answers: Sequence[Sequence[int]],
    progress: Progress | None = None,
) -> AnswerScores:
    """Teacher-forced scores of answers[i] after contexts[i]; distinct pairs of equal answer
    length are scored together (one `scorer.logprobs` call per answer length). `progress`, if
    given, is passed on to the scorer, which calls it after every batch (request)."""
    # only a wanted bar is passed on, so scorers without progress reporting (test doubles) still work
    report = {} if progress is None else {"progress": progress}
    if hasattr(scorer, "score_answers"):  # a scorer that scores answers itself (EndpointScorer: one echo request each)
        return scorer.score_answers(contexts, answers, **report)
    pairs, pair_of = distinct_pairs(contexts, answers)
    n = len(pairs)
    logprob, correct, first = np.zeros(n), np.zeros(n, dtype=bool), np.zeros(n, dtype=np.int64)
    cache: CachedAnswers | None = getattr(scorer, "answer_cache", None)
    todo = list(range(n))
    if cache is not None:
        keys = [pair_key(pair) for pair in pairs]
        known = cache.found(keys)
        for i, (lp, ok, top) in known.items():
            logprob[i], correct[i], first[i] = lp, ok, top
        todo = [i for i in range(n) if i not in known]
        if progress is not None and known:
            progress(len(known))
    # with a cache, a group is scored and kept a few batches at a time, so an interruption loses little
    step = CACHED_BATCHES * max(1, getattr(scorer, "batch_size", 1)) * max(1, getattr(scorer, "workers", 1))
    for k, group in rows_by_answer_length([pairs[i] for i in todo]).items():
        rows_k = [todo[j] for j in group]
        size = step if cache is not None else len(rows_k)
        for start in range(0, len(rows_k), size):
            rows = rows_k[start : start + size]
            sequences = [[*pairs[i][0], *pairs[i][1][:-1]] for i in rows]
            lp = scorer.logprobs(sequences, k, **report)  # [n_k, k, V]
            target = torch.tensor([pairs[i][1] for i in rows], dtype=torch.long)  # [n_k, k]
            top = lp.argmax(dim=-1)
            logprob[rows] = lp.gather(-1, target[..., None])[..., 0].sum(-1).double().numpy()
            correct[rows] = (top == target).all(dim=-1).numpy()
            first[rows] = top[:, 0].numpy()
            if cache is not None:
                cache.put([(keys[i], [float(logprob[i]), bool(correct[i]), int(first[i])]) for i in rows])
    return AnswerScores(logprob=logprob[pair_of], correct=correct[pair_of], first_argmax=first[pair_of])
