"""Score the prompts of a lookup or needle run, keeping per-prompt positions and labels, and
check the position controls on exactly the prompts that were scored."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

import numpy as np

from phasekv.results.record import RECORD_COLUMNS, prompt_records
from phasekv.scoring import Scorer, score_answers
from phasekv.tasks import placement
from phasekv.tasks.prompts import Prompt

from .plan import ScoringPlan, ScoringProgress, plan_pairs, scores_by_request

CHUNK_BATCHES = 16  # prompts built and scored at once = max(CHUNK_PROMPTS, CHUNK_BATCHES x batch size)
CHUNK_PROMPTS = 4096  # identical prompts are scored once per chunk, so chunks should span many units


@dataclass(frozen=True)
class PromptScores:
    """Per-prompt arrays, each [N] in prompt order: `correct`, `logprob` (answer, summed),
    `residue`, `unit`, `placement`, `target_position` (t_K), `query_position`, `prompt_id` (equal for
    identical prompts: the same tokens and answer, which a deterministic model answers once), and the layout
    checks `answer_follows_key` (the answer tokens sit right after the target key) and
    `query_repeats_key` (the prompt ends with the target key)."""

    correct: np.ndarray
    logprob: np.ndarray
    residue: np.ndarray
    unit: np.ndarray
    placement: np.ndarray
    target_position: np.ndarray
    query_position: np.ndarray
    answer_follows_key: np.ndarray
    query_repeats_key: np.ndarray
    prompt_id: np.ndarray

    def records(self, unit: str, extra_columns: dict | None = None) -> dict:
        """The per-prompt records of the results (`record.prompt_records`); `unit` names what a
        unit is (mapping, haystack); `prompt_id` follows the standard columns (identical prompts, so that a
        verdict can be recomputed from the file), then `extra_columns` (per-prompt arrays [N])."""
        columns = {name: getattr(self, name) for name in RECORD_COLUMNS if name != "answer_logprob"}
        columns = {**columns, "answer_logprob": self.logprob, "prompt_id": self.prompt_id}
        return prompt_records({**columns, **(extra_columns or {})}, unit)


def prompt_id(prompt: Prompt, seen: dict) -> int:
    """The index of `prompt` among the distinct prompts met so far in `seen` (the same tokens and answer are one
    prompt: a deterministic model answers them once)."""
    return seen.setdefault((tuple(prompt.input_ids), tuple(prompt.answer_ids)), len(seen))


def chunk_size(batch_size: int) -> int:
    return max(CHUNK_PROMPTS, CHUNK_BATCHES * batch_size)


def prompt_chunks(prompts: Sequence[Prompt], batch_size: int) -> Iterator[tuple[int, list[Prompt]]]:
    """(start, prompts) of each chunk scored at once, built on demand."""
    n, size = len(prompts), chunk_size(batch_size)
    for start in range(0, n, size):
        yield start, [prompts[i] for i in range(start, min(n, start + size))]


def plan_prompt_set(prompts: Sequence[Prompt], batch_size: int, requests: bool = False) -> ScoringPlan:
    """The plan of `score_prompt_set` on `prompts` with this batch size (requests: through an
    endpoint), with the design counts read off the prompts."""
    seen = {name: set() for name in ("residue", "unit", "placement", "query_position")}

    def chunks():
        for _, chunk in prompt_chunks(prompts, batch_size):
            for name, values in seen.items():
                values.update(getattr(p, name) for p in chunk)
            yield [p.input_ids for p in chunk], [p.answer_ids for p in chunk]

    plan = plan_pairs(chunks(), batch_size, requests=requests)
    design = {
        "residue groups": len(seen["residue"]),
        "units": len(seen["unit"]),
        "placements per unit and residue": len(seen["placement"]),
        "query positions": ", ".join(map(str, sorted(seen["query_position"]))),
    }
    return replace(plan, design=design)


def score_prompt_set(
    scorer: Scorer,
    prompts: Sequence[Prompt],
    key_length: int,
    desc: str,
    progress: bool | Callable[[int], None] = True,
) -> PromptScores:
    """Score every prompt (built chunk by chunk, so lazy prompt sequences stay lazy).

    `key_length` is the number of key tokens starting at t_K (1 for lookup). With `progress` the
    plan is printed first and a bar moves after every batch (`plan.ScoringProgress`); a callable
    `progress` is called instead, with the rows of each batch.
    """
    n = len(prompts)
    fields = {name: np.zeros(n, dtype=np.int64) for name in ("residue", "unit", "placement")}
    fields |= {name: np.zeros(n, dtype=np.int64) for name in ("target_position", "query_position")}
    checks = {name: np.zeros(n, dtype=bool) for name in ("answer_follows_key", "query_repeats_key")}
    correct, logprob = np.zeros(n, dtype=bool), np.zeros(n)
    prompt_ids, distinct = np.zeros(n, dtype=np.int64), {}
    bar = progress if callable(progress) else None
    if progress is True:
        bar = ScoringProgress(plan_prompt_set(prompts, scorer.batch_size, scores_by_request(scorer)), desc)
    try:
        for start, batch in prompt_chunks(prompts, scorer.batch_size):
            scores = score_answers(scorer, [p.input_ids for p in batch], [p.answer_ids for p in batch], bar)
            rows = slice(start, start + len(batch))
            correct[rows], logprob[rows] = scores.correct, scores.logprob
            for name in fields:
                fields[name][rows] = [getattr(p, name) for p in batch]
            checks["answer_follows_key"][rows] = [_answer_follows_key(p, key_length) for p in batch]
            checks["query_repeats_key"][rows] = [_query_repeats_key(p, key_length) for p in batch]
            prompt_ids[rows] = [prompt_id(p, distinct) for p in batch]
    finally:
        if isinstance(bar, ScoringProgress):
            bar.close()
    return PromptScores(correct=correct, logprob=logprob, **fields, **checks, prompt_id=prompt_ids)


def _answer_follows_key(p: Prompt, key_length: int) -> bool:
    start = p.target_position + key_length
    return p.input_ids[start : start + len(p.answer_ids)] == list(p.answer_ids)


def _query_repeats_key(p: Prompt, key_length: int) -> bool:
    key = p.input_ids[p.target_position : p.target_position + key_length]
    return p.query_position == len(p.input_ids) - 1 and p.input_ids[-key_length:] == key


def position_controls(scores: PromptScores, modulus: int) -> tuple[list[dict], dict]:
    """(per-residue position statistics, checks) computed from the scored prompts.

    Rows: residue, count, mean and variance of t_K, query position. Checks (exact integer
    arithmetic): one query position for all prompts, equal mean and equal variance of t_K in
    every residue group, t_K mod M equal to the group's residue, and the layout checks.
    """
    groups = {int(r): scores.target_position[scores.residue == r] for r in np.unique(scores.residue)}
    queries = sorted({int(q) for q in scores.query_position})
    moments = {r: placement.exact_moments(t) for r, t in groups.items()}
    rows = placement.position_stats(groups, queries[0])
    checks = {
        "query_position_fixed": len(queries) == 1,
        "query_positions": queries,
        "equal_mean_target_position": len({m for m, _ in moments.values()}) == 1,
        "equal_var_target_position": len({v for _, v in moments.values()}) == 1,
        "equal_group_sizes": len({len(t) for t in groups.values()}) == 1,
        "target_at_residue": bool(np.all(scores.target_position % modulus == scores.residue)),
        "answer_follows_key": bool(scores.answer_follows_key.all()),
        "query_repeats_key": bool(scores.query_repeats_key.all()),
    }
    return rows, checks
