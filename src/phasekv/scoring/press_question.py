"""Which prompt tokens a KV-cache press compresses: the probes' *question* (kept exact).

A press compresses the context after its prefill; the question is decoded against the compressed
cache (`scoring.press.KVPressScorer`). The question is the probe's query tail after the records:
- lookup: the demonstrations and the query (paper template: `; a n` x n_demos then `; a_k`,
  3 n_demos + 2 tokens; other templates: their demonstration and query phrases, as compiled);
- needle: the query (paper template: `; q_1 .. q_k`, 1 + key_tokens tokens);
- flip: the last prompt token (the whole fixed context is part of the document being compressed).
Everything before it (prefix, padding, filler, records) is the context.
"""

from __future__ import annotations

from ..tasks.lookup import LookupOptions, lookup_format
from ..tasks.needle import NeedleOptions, needle_format

FLIP_QUESTION_TOKENS = 1


def question_tokens(tokenizer, options: LookupOptions | NeedleOptions) -> int:
    """Tokens at the end of every prompt of a lookup or needle run that a press leaves uncompressed:
    the lengths of the run's template as compiled for `tokenizer`."""
    if isinstance(options, LookupOptions):
        form = lookup_format(tokenizer, options)
        return options.n_demos * form.demo.length(form.sizes) + form.query.length(form.sizes)
    if isinstance(options, NeedleOptions):
        form = needle_format(tokenizer, options)
        return form.query.length(form.sizes)
    raise TypeError(f"no question defined for {type(options).__name__}")


def bind_question(scorer, n_tokens: int):
    """Tell a press scorer how many prompt tokens are the question (other scorers need not know);
    returns the scorer."""
    if hasattr(scorer, "question_tokens"):
        scorer.question_tokens = n_tokens
    return scorer
