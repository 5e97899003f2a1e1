"""Which prompt tokens a KV-cache press compresses: the probes' *question* (kept exact).

A press compresses the context after its prefill; the question is decoded against the compressed
cache (`scoring.press.KVPressScorer`). The question is the probe's query tail after the records:
- lookup: the demonstrations and the query, `; a n` x n_demos then `; a_k` (3 n_demos + 2 tokens);
- needle: the query, `; q_1 .. q_k` (1 + key_tokens tokens);
- flip: the last prompt token (the whole fixed context is part of the document being compressed).
Everything before it (prefix, padding, filler, records) is the context.
"""

from __future__ import annotations

from ..tasks.lookup import LookupOptions
from ..tasks.needle import NeedleOptions

FLIP_QUESTION_TOKENS = 1


def question_tokens(options: LookupOptions | NeedleOptions) -> int:
    """Tokens at the end of every prompt of a lookup or needle run that a press leaves uncompressed."""
    if isinstance(options, LookupOptions):
        return 3 * options.n_demos + 2
    if isinstance(options, NeedleOptions):
        return 1 + options.key_tokens
    raise TypeError(f"no question defined for {type(options).__name__}")


def bind_question(scorer, n_tokens: int):
    """Tell a press scorer how many prompt tokens are the question (other scorers need not know);
    returns the scorer."""
    if hasattr(scorer, "question_tokens"):
        scorer.question_tokens = n_tokens
    return scorer
