"""The needle probe end to end: every haystack at every residue, so haystacks are the blocks.

A prompt is correct when greedy decoding produces the whole value (every value token is the
full-vocabulary top-1, teacher forced). Each haystack is placed at every residue, so outcomes are
paired within haystacks: the summary takes the per-(haystack, residue) cells like the lookup probe
(bootstrap over haystacks for every interval, residue labels permuted within haystacks), and the
verdict on phase sensitivity comes from `stats.phase_verdict` with haystacks as units.
"""

from __future__ import annotations

from dataclasses import asdict

from ..scoring import Scorer
from ..tasks.needle import NeedleOptions, needle_prompts
from .record import RunClock, prompt_prefix
from .scored import position_controls, score_prompt_set
from .stride import resolve_stride
from .units import summarize_units


def run_needle(
    scorer: Scorer,
    options: NeedleOptions = NeedleOptions(),
    *,
    stride: int | None = None,
    n_resamples: int = 2000,
    progress: bool = True,
) -> dict:
    """Generate, score and summarise a needle run; returns the result dict."""
    clock = RunClock()
    stride, stride_source = resolve_stride(stride, scorer.compression_stride, options.modulus)
    prefix = prompt_prefix(scorer.tokenizer)
    prompt_set = needle_prompts(scorer.tokenizer, options, prefix)
    key_length = prompt_set.options["answer_offset"]  # the key phrase: tokens from t_K to the answer
    scores = score_prompt_set(scorer, prompt_set.prompts, key_length=key_length, desc="needle", progress=progress)
    per_haystack = prompt_set.options["placements_per_haystack"]
    _, summary, verdict = summarize_units(
        scores,
        options.n_haystacks,
        options.modulus,
        per_haystack,
        stride=stride,
        model_stride=scorer.compression_stride,
        seed=options.seed,
        n_resamples=n_resamples,
    )
    position_stats, controls = position_controls(scores, options.modulus)
    return clock.envelope(
        "needle",
        scorer,
        prefix,
        protocol=options.protocol,
        seed=options.seed,
        options={**asdict(options), **prompt_set.options},
        n_prompts=len(scores.correct),
        stride={"value": stride, "source": stride_source},
        aggregation={
            "cell": "mean over the placements of one haystack in one residue group",
            "bootstrap_unit": "haystack",
            "permutation": "residue labels of the cells shuffled within each haystack",
            "counts": "prompts = haystacks x placements per residue",
            "n_haystacks": options.n_haystacks,
            "placements_per_haystack": per_haystack,
        },
        summary=summary.to_dict(),
        phase_test=verdict.to_dict(),
        position_stats=position_stats,
        controls=controls,
        mean_answer_logprob=float(scores.logprob.mean()),
        prompt_records=scores.records("haystack"),
    )
