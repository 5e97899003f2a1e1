"""Real text and the synthetic retrieval mixture in one stream, at a fixed ratio.

Sequence i of every global batch is a text window when floor((i + 1) f) > floor(i f), f = the text
fraction, else a mixture sequence: every batch of B sequences holds floor(B f) or ceil(B f) text
windows spread evenly through it, the same in every run, resumable from the batch position alone and
independent of how the batch is split across ranks. Text windows are scored on every token; mixture
sequences on their answers only (their own loss masks).
"""

from __future__ import annotations

import math

import numpy as np

from phasekv.corpus.batch import Batch
from phasekv.corpus.mixture import MixtureSource
from phasekv.corpus.tokens import TokenWindowSource


def is_text(index: int, text_fraction: float) -> bool:
    """Whether sequence `index` of a batch is a text window at this text fraction."""
    return math.floor((index + 1) * text_fraction) > math.floor(index * text_fraction)


class MixedSource:
    """A `DataSource` drawing `text_fraction` of each batch from `text` and the rest from `mixture`;
    both must share one tokenizer (equal vocabulary sizes) and one sequence length."""

    def __init__(self, mixture: MixtureSource, text: TokenWindowSource, text_fraction: float):
        if not 0 < text_fraction < 1:
            raise ValueError(f"text_fraction must be in (0, 1) for a mixed stream, got {text_fraction}")
        if mixture.vocab_size != text.vocab_size:
            raise ValueError(
                f"the token files ({text.directory}) have a vocabulary of {text.vocab_size} and the mixture's "
                f"tokenizer {mixture.vocab_size}: tokenize the text and build the mixture with the same tokenizer"
            )
        if mixture.seq_len != text.seq_len:
            raise ValueError(f"sequence lengths differ: mixture {mixture.seq_len}, text {text.seq_len}")
        self.mixture, self.text, self.text_fraction = mixture, text, text_fraction
        self.vocab_size = text.vocab_size

    def batch(self, split: str, position: int, indices: range) -> Batch:
        text_rows = [i for i in indices if is_text(i, self.text_fraction)]
        mixture_rows = [i for i in indices if not is_text(i, self.text_fraction)]
        parts = {}
        if text_rows:
            parts["text"] = (text_rows, self.text.batch(split, position, text_rows))
        if mixture_rows:
            parts["mixture"] = (mixture_rows, self.mixture.batch(split, position, mixture_rows))
        order = {i: n for n, i in enumerate(indices)}
        tokens = np.empty((len(order), self.text.seq_len + 1), dtype=np.int64)
        mask = np.empty(tokens.shape, dtype=bool)
        for rows, batch in parts.values():
            at = [order[i] for i in rows]
            tokens[at], mask[at] = batch.tokens.numpy(), batch.loss_mask.numpy()
        return Batch.from_numpy(tokens, mask)

    def describe(self) -> dict:
        return {
            "kind": "mixed",
            "text_fraction": self.text_fraction,
            "vocab_size": self.vocab_size,
            "text": self.text.describe(),
            "mixture": self.mixture.describe(),
        }
