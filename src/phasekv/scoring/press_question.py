"""Which prompt tokens a KV-cache press compresses: the probes' *question* (kept exact).

A press compresses the context after its prefill; the question is decoded against the compressed
cache (`scoring.press.KVPressScorer`). The question is the probe's query tail after its content: each
residue probe says how long it is for a tokenizer (`Probe.question`, `studies.probe.registry`); for the
flip probe it is the last prompt token (the whole fixed context is part of the document being compressed).
Everything before it (prefix, padding, filler, records) is the context.
"""

from __future__ import annotations

FLIP_QUESTION_TOKENS = 1


def bind_question(scorer, n_tokens: int):
    """Tell a press scorer how many prompt tokens are the question (other scorers need not know);
    returns the scorer."""
    if hasattr(scorer, "question_tokens"):
        scorer.question_tokens = n_tokens
    return scorer
