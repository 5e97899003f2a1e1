"""One scoring interface over our checkpoints and any Hugging Face causal LM.

A scorer turns prompts (lists of token ids) into log-probabilities over the full vocabulary at
their last positions (`Scorer.logprobs`); `score_answers` turns those into teacher-forced answer
scores (summed log-prob, full-vocabulary top-1 at every answer token). `load_scorer` reads a
model directory's config.json and picks `PhaseKVScorer` or `HFScorer`.
"""

from .answers import AnswerScores, CachedAnswers, distinct_pairs, rows_by_answer_length, score_answers
from .base import BatchedScorer, NonFiniteOutput, Scorer, ScorerError, check_finite, non_finite
from .hf_scorer import HFScorer, hf_compression_stride
from .load import load_scorer
from .phasekv_scorer import PhaseKVScorer

__all__ = [
    "AnswerScores",
    "BatchedScorer",
    "HFScorer",
    "NonFiniteOutput",
    "PhaseKVScorer",
    "Scorer",
    "ScorerError",
    "check_finite",
    "distinct_pairs",
    "hf_compression_stride",
    "load_scorer",
    "non_finite",
    "rows_by_answer_length",
    "score_answers",
    "CachedAnswers",
]
