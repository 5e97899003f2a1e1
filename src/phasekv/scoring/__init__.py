"""One scoring interface over our checkpoints and any Hugging Face causal LM.

A scorer turns prompts (lists of token ids) into log-probabilities over the full vocabulary at
their last positions (`Scorer.logprobs`); `score_answers` turns those into teacher-forced answer
scores (summed log-prob, full-vocabulary top-1 at every answer token). `load_scorer` reads a
model directory's config.json and picks `PhaseKVScorer` or `HFScorer`.

The names below load with their modules on first use, so that the torch-free modules of this package (the
`--press` spec reader `press_spec` and the presses it registers) import without torch: the command line's help
lists the registered presses.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "AnswerScores": "answers",
    "CachedAnswers": "answers",
    "distinct_pairs": "answers",
    "rows_by_answer_length": "answers",
    "score_answers": "answers",
    "BatchedScorer": "base",
    "NonFiniteOutput": "base",
    "Scorer": "base",
    "ScorerError": "base",
    "check_finite": "base",
    "non_finite": "base",
    "HFScorer": "hf_scorer",
    "hf_compression_stride": "hf_scorer",
    "load_scorer": "load",
    "PhaseKVScorer": "phasekv_scorer",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value
