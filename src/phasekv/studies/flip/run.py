"""The flip probe end to end: candidate probabilities at every filler length and family, the
candidate on top, and the best-fitting period-P pattern (see `pattern`).

A candidate's score is its summed teacher-forced log-prob (multi-token candidates such as "32"
in a digit-level tokenizer); its probability is exp of that. Candidates are tokenised as the
tokens that `context + candidate` adds after the context's own tokens, or alone when the
candidate would merge with the end of the context.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from phasekv.results.record import RunClock, prompt_prefix, prompt_records
from phasekv.scoring import Scorer, score_answers
from phasekv.stats.stride import resolve_period
from phasekv.studies.flip.pattern import best_pattern, detect_period, pattern_test
from phasekv.studies.flip.prompts import FlipSet, make_flip_families, seam_ids
from phasekv.studies.probe.plan import ScoringPlan, ScoringProgress, plan_pairs, scores_by_request
from phasekv.tasks.templates import check_round_trip

from .options import FlipOptions


def _encode(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def candidate_ids(tokenizer, context: str, candidate: str) -> tuple[list[int], str]:
    """(token ids of `candidate` after `context`, how they were tokenised)."""
    ctx, full = _encode(tokenizer, context), _encode(tokenizer, context + candidate)
    if full[: len(ctx)] == ctx and len(full) > len(ctx):
        return full[len(ctx) :], "in context"
    alone = _encode(tokenizer, candidate)
    if not alone:
        raise ValueError(f"the candidate {candidate!r} encodes to no tokens")
    return alone, "alone (in context it merges with the end of the context)"


def check_options(options: FlipOptions) -> None:
    """Raise ValueError for options no run can use (checked before any model loads)."""
    if len(options.candidates) < 2 or len(set(options.candidates)) != len(options.candidates):
        raise ValueError(f"give at least two distinct candidates, got {list(options.candidates)}")
    if options.min_length < 0 or options.n_lengths < 1:
        raise ValueError("min_length must be >= 0 and n_lengths >= 1")
    if not options.context:
        raise ValueError("the context is empty")


@dataclass(frozen=True)
class FlipPrompts:
    """What a flip run scores: every family's prompts (`sets`), each followed by every candidate
    (`encoded`: per candidate its token ids and how they were tokenised)."""

    candidates: list[str]
    encoded: list[tuple[list[int], str]]
    context_ids: list[int]
    prefix: list[int]
    separator: list[int]
    lengths: list[int]
    sets: dict[str, FlipSet]

    def pairs(self, family: str) -> tuple[list[list[int]], list[list[int]]]:
        """(contexts, answers) of one family: every prompt once per candidate, candidates innermost."""
        prompts = self.sets[family].prompts
        return [p.input_ids for p in prompts for _ in self.encoded], [ids for _ in prompts for ids, _ in self.encoded]

    def rows(self) -> list[dict]:
        """One dict per scored (prompt, candidate), in scoring order: ids and what they are."""
        return [
            {
                "family": family,
                "filler_length": p.filler_length,
                "candidate": c,
                "query_position": p.query_position,
                "input_ids": p.input_ids,
                "answer_ids": ids,
            }
            for family, flip_set in self.sets.items()
            for p in flip_set.prompts
            for c, (ids, _) in zip(self.candidates, self.encoded, strict=True)
        ]


def flip_prompts(tokenizer, options: FlipOptions) -> FlipPrompts:
    """The prompts and candidates of a flip run (checks the options and the candidates' tokens)."""
    check_options(options)
    cands = list(options.candidates)
    encoded = [candidate_ids(tokenizer, options.context, c) for c in cands]
    if len({tuple(ids) for ids, _ in encoded}) < len(cands):
        raise ValueError(f"candidates {cands} share the same token ids under this tokenizer")
    prefix = prompt_prefix(tokenizer)
    lengths = list(range(options.min_length, options.min_length + options.n_lengths))
    separator, context_ids = seam_ids(tokenizer, options.template, options.context)
    sets = make_flip_families(tokenizer, context_ids, lengths, options.families, prefix, separator)
    if options.template != "paper":  # the paper's layout joins ids, not text
        for flip_set in sets.values():
            check_round_trip(tokenizer, flip_set.prompts, len(prefix), options.template, limit=len(flip_set.prompts))
    return FlipPrompts(cands, encoded, context_ids, prefix, list(separator), lengths, sets)


def plan_flip(prompts: FlipPrompts, batch_size: int, requests: bool = False) -> ScoringPlan:
    """The plan of scoring `prompts` (one `score_answers` call per family)."""
    design = {
        "filler families": len(prompts.sets),
        "lengths": len(prompts.lengths),
        "candidates": len(prompts.candidates),
    }
    return plan_pairs((prompts.pairs(f) for f in prompts.sets), batch_size, requests=requests, design=design)


def run_flip(scorer: Scorer, options: FlipOptions = FlipOptions(), *, progress: bool = True) -> dict:
    """Score every candidate at every filler length of every family; fit the phase pattern."""
    clock = RunClock()
    tok = scorer.tokenizer
    period, period_source = resolve_period(options.period, scorer.compression_stride)
    built = flip_prompts(tok, options)
    cands, encoded, context_ids, lengths = built.candidates, built.encoded, built.context_ids, built.lengths
    families, winners, records = {}, [], []
    firsts = {ids[0] for ids, _ in encoded}
    bar = ScoringProgress(plan_flip(built, scorer.batch_size, scores_by_request(scorer)), "flip") if progress else None
    try:
        for family in built.sets:
            scores = score_answers(scorer, *built.pairs(family), bar)
            records.append(scores)
            logprob = scores.logprob.reshape(len(lengths), len(cands))
            prob = np.exp(logprob)
            top = logprob.argmax(axis=1)
            ordered = np.sort(prob, axis=1)
            winners.append(top)
            families[family] = {
                "lengths": lengths,
                "logprobs": logprob.round(6).tolist(),
                "probabilities": prob.round(6).tolist(),
                "top": [cands[c] for c in top],
                "margin": (ordered[:, -1] - ordered[:, -2]).round(6).tolist(),
                "model_top1": [tok.decode([int(t)]) for t in scores.first_argmax[:: len(cands)]],
                # the model's own next token starts a candidate? (else "top" is only the likelier candidate)
                "model_top1_is_candidate": [bool(t in firsts) for t in scores.first_argmax[:: len(cands)]],
                "pattern": best_pattern(top, lengths, period, len(cands)).to_dict(cands),
            }
    finally:
        if bar is not None:
            bar.close()
    pooled = best_pattern(np.stack(winners), lengths, period, len(cands))
    test = pattern_test(np.stack(winners), lengths, period, len(cands), options.n_permutations, options.seed)
    # periods with at least two lengths in every residue class
    scan = detect_period(
        np.stack(winners),
        lengths,
        range(2, max(2, len(lengths) // 2) + 1),
        len(cands),
        options.n_permutations,
        options.seed,
    )
    unk = tok.unk_token_id
    return clock.envelope(
        "flip",
        scorer,
        built.prefix,
        seed=options.seed,
        options={**asdict(options), "lengths": lengths, "families": list(built.sets)},
        period={"value": period, "source": period_source},
        context_ids=context_ids,
        context_unknown_tokens=0 if unk is None else context_ids.count(unk),
        candidates=[
            {"text": c, "ids": ids, "tokens": tok.convert_ids_to_tokens(ids), "tokenised": how}
            for c, (ids, how) in zip(cands, encoded, strict=True)
        ],
        families=families,
        pattern={"pooled": pooled.to_dict(cands), "test": test},
        period_scan=scan,
        prompt_records=_flip_records(built, records, period),
    )


def _flip_records(built: FlipPrompts, scores: list, period: int) -> dict:
    """Per-prompt records (`record.prompt_records`) of a flip run; `scores` per family, in order."""
    rows = built.rows()
    column = lambda key: np.array([r[key] for r in rows])  # noqa: E731
    lengths = column("filler_length")
    return prompt_records(
        {
            "target_position": len(built.prefix) + lengths + len(built.separator),  # the context's first token
            "query_position": column("query_position"),
            "residue": lengths % period,
            "unit": np.array([list(built.sets).index(r["family"]) for r in rows]),
            "placement": np.zeros(len(rows), dtype=np.int64),
            "correct": np.concatenate([s.correct for s in scores]),
            "answer_logprob": np.concatenate([s.logprob for s in scores]),
            "filler_length": lengths,
            "candidate": np.array([built.candidates.index(r["candidate"]) for r in rows]),
        },
        "filler family",
        unit_names=list(built.sets),
        candidates=built.candidates,
    )
