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
from tqdm.auto import tqdm

from ..scoring import Scorer, score_answers
from ..tasks.flip import make_flip_families, seam_ids
from ..tasks.templates import check_round_trip
from .pattern import best_pattern, detect_period, pattern_test
from .record import RunClock, prompt_prefix
from .stride import resolve_period

DEFAULT_CONTEXT = (
    "def act_quant_kernel(N, block=128):\n"
    "    for i, j in T.Parallel(blk_m, group_size):\n"
    "        s_local[i] = T.max(amax_local[i], 1e-4) / fp8_max\n"
    "        y_local[i, j] = T.Cast(FP"
)


@dataclass(frozen=True)
class FlipOptions:
    """Options of a flip run: filler lengths are min_length .. min_length + n_lengths - 1 tokens;
    `families` None means every filler family; `period` None resolves by `resolve_period`;
    `template` joins filler and context (`tasks.flip.FLIP_TEMPLATES`)."""

    context: str = DEFAULT_CONTEXT
    candidates: tuple[str, ...] = ("8", "32")
    min_length: int = 16
    n_lengths: int = 16
    families: tuple[str, ...] | None = None
    period: int | None = None
    n_permutations: int = 2000
    seed: int = 0
    template: str = "paper"


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


def _check(options: FlipOptions) -> None:
    if len(options.candidates) < 2 or len(set(options.candidates)) != len(options.candidates):
        raise ValueError(f"give at least two distinct candidates, got {list(options.candidates)}")
    if options.min_length < 0 or options.n_lengths < 1:
        raise ValueError("min_length must be >= 0 and n_lengths >= 1")
    if not options.context:
        raise ValueError("the context is empty")


def run_flip(scorer: Scorer, options: FlipOptions = FlipOptions(), *, progress: bool = True) -> dict:
    """Score every candidate at every filler length of every family; fit the phase pattern."""
    _check(options)
    clock = RunClock()
    tok = scorer.tokenizer
    period, period_source = resolve_period(options.period, scorer.compression_stride)
    cands = list(options.candidates)
    encoded = [candidate_ids(tok, options.context, c) for c in cands]
    if len({tuple(ids) for ids, _ in encoded}) < len(cands):
        raise ValueError(f"candidates {cands} share the same token ids under this tokenizer")
    prefix = prompt_prefix(tok)
    lengths = list(range(options.min_length, options.min_length + options.n_lengths))
    separator, context_ids = seam_ids(tok, options.template, options.context)
    sets = make_flip_families(tok, context_ids, lengths, options.families, prefix, separator)
    if options.template != "paper":  # the paper's layout joins ids, not text
        for flip_set in sets.values():
            check_round_trip(tok, flip_set.prompts, len(prefix), options.template, limit=len(flip_set.prompts))
    families, winners = {}, []
    firsts = {ids[0] for ids, _ in encoded}
    for family, flip_set in tqdm(sets.items(), desc="flip", unit="family", disable=not progress):
        contexts = [p.input_ids for p in flip_set.prompts for _ in cands]
        scores = score_answers(scorer, contexts, [ids for _ in flip_set.prompts for ids, _ in encoded])
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
        prefix,
        seed=options.seed,
        options={**asdict(options), "lengths": lengths, "families": list(sets)},
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
    )


def _probability(p: float) -> str:
    return f"{p:.2f}" if p >= 0.005 else f"{p:.0e}"


def format_flip(result: dict) -> str:
    """Text table: per family the candidate on top at every length, P(first candidate), and the
    family's pattern; then the pooled pattern with its chance comparison."""
    cands = [c["text"] for c in result["candidates"]]
    period = result["period"]["value"]
    first = next(iter(result["families"].values()))
    width = max(5, *(len(c) for c in cands))
    lines = [f"{'family':<8} {'L':>4} " + " ".join(f"{n:>{width}}" for n in first["lengths"])]
    for family, rec in result["families"].items():
        lines.append(f"{family:<8} {'top':>4} " + " ".join(f"{t:>{width}}" for t in rec["top"]))
        p_first = " ".join(f"{_probability(p[0]):>{width}}" for p in rec["probabilities"])
        lines.append(f"{'':<8} {'P(' + cands[0] + ')':>4} " + p_first)
        pat = rec["pattern"]
        lines.append(f"{'':<8} pattern: {pat['description']} ({pat['agree']} of {pat['total']} lengths agree)")
        own = [t for t, ok in zip(rec["model_top1"], rec["model_top1_is_candidate"], strict=True) if not ok]
        if own:
            common = max(set(own), key=own.count)
            lines.append(
                f"{'':<8} the model's own next token is no candidate at {len(own)} of {len(rec['top'])} lengths "
                f"(most often {common!r}): 'top' is only the likelier candidate there"
            )
    pooled, test = result["pattern"]["pooled"], result["pattern"]["test"]
    lines.append(
        f"period {period} ({result['period']['source']}): {pooled['description']}; "
        f"{pooled['agree']} of {pooled['total']} rankings follow it"
    )
    lines.append(
        f"chance: best constant pattern {test['constant_pattern_agree']} of {test['total']}; shuffled lengths "
        f"mean {test['permutation_mean_agree']:.1f}, permutation p = {test['permutation_p_value']:.4f}"
    )
    return "\n".join(lines)
