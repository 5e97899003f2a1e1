"""The needle probe end to end: independent prompts, Wilson intervals, chi-square test.

A prompt is correct when greedy decoding produces the whole value (every value token is the
full-vocabulary top-1, teacher forced).
"""

from __future__ import annotations

from dataclasses import asdict

from ..scoring import Scorer
from ..stats import summarize_prompts
from ..tasks.needle import NeedleOptions, make_needle
from ..tasks.prompts import PromptSet
from ..tasks.vocab import task_vocab
from .record import RunClock, prompt_prefix
from .scored import position_controls, score_prompt_set
from .stride import resolve_stride


def needle_prompts(tokenizer, options: NeedleOptions) -> tuple[list[int], PromptSet]:
    """(prompt prefix ids, prompts) of a needle run: what `run_needle` scores."""
    vocab = task_vocab(tokenizer, n_animals=2, n_names=1)
    prefix = prompt_prefix(tokenizer)
    return prefix, make_needle(vocab, options, prefix)


def run_needle(
    scorer: Scorer, options: NeedleOptions = NeedleOptions(), *, stride: int | None = None, progress: bool = True
) -> dict:
    """Generate, score and summarise a needle run; returns the result dict."""
    clock = RunClock()
    stride, stride_source = resolve_stride(stride, scorer.compression_stride, options.modulus)
    prefix, prompt_set = needle_prompts(scorer.tokenizer, options)
    scores = score_prompt_set(
        scorer, prompt_set.prompts, key_length=options.key_tokens, desc="needle", progress=progress
    )
    summary = summarize_prompts(scores.correct, scores.residue, options.modulus, stride=stride)
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
        summary=summary.to_dict(),
        position_stats=position_stats,
        controls=controls,
        mean_answer_logprob=float(scores.logprob.mean()),
        prompt_records=scores.records("haystack"),
    )
