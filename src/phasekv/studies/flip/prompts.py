"""The flipping-completion probe (paper, "A flipping completion").

A fixed context (token ids, e.g. code ending in `T.Cast(FP`) is preceded by filler whose length
grows one token at a time; the scorer then compares candidate continuations at every length.
Filler comes from a family (`words.filler_families()`: equals signs, lorem words, digits, a prose
sentence, full stops), encoded once into a token stream so that the prompt of length L+1 holds
the filler of length L plus one more token: only the context's offset changes.

Templates (`FLIP_TEMPLATES`): `paper` puts the context right after the filler (the paper's
layout; with a BPE tokenizer the ids at the seam may be ones no text encodes to), `natural` (and
`sentence`) start the context on a new line after the filler, so the prompt is text a tokenizer
produces (checked by decoding and re-encoding every prompt).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from phasekv.tasks import words

# text between the filler and the context; the record templates' names, so one --template serves every probe
FLIP_TEMPLATES = {"paper": "", "natural": "\n", "sentence": "\n"}


def seam_ids(tokenizer, template: str, context: str) -> tuple[list[int], list[int]]:
    """(separator ids, context ids) of `template`. `paper`: no separator, the context encoded on its
    own. Otherwise the separator and context are encoded after a word, as they stand in a prompt
    (a SentencePiece tokenizer marks a text's first word with "▁"), and must split there."""
    if template not in FLIP_TEMPLATES:
        raise ValueError(f"unknown flip template {template!r}; choose one of {', '.join(FLIP_TEMPLATES)}")
    text = FLIP_TEMPLATES[template]

    def encode(s: str) -> list[int]:
        return list(tokenizer(s, add_special_tokens=False)["input_ids"])

    if not text:
        return [], encode(context)
    lead, separated, full = encode("x"), encode("x" + text), encode("x" + text + context)
    if separated[: len(lead)] != lead or full[: len(separated)] != separated or len(separated) == len(lead):
        raise ValueError(f"the {template} flip template's text {text!r} merges with its neighbours for this tokenizer")
    return separated[len(lead) :], full[len(separated) :]


@dataclass(frozen=True)
class FlipPrompt:
    """prefix + filler[:filler_length] + context; the next token is predicted at query_position."""

    input_ids: list[int]
    filler_length: int
    family: str
    query_position: int


@dataclass(frozen=True)
class FlipSet:
    """Flip prompts of one family, with the settings that made them."""

    options: dict
    prompts: list[FlipPrompt]


PAD_FAMILY = "pad"  # the tokenizer's pad token repeated: the filler of models trained with pad gaps


def filler_stream(tokenizer, family: str, n_tokens: int) -> list[int]:
    """The first `n_tokens` token ids of the family's text (no special tokens added); the family
    `PAD_FAMILY` is the tokenizer's pad token repeated.

    The text is repeated until its encoding is long enough, then cut. Draw one stream for the
    longest length of a sweep and slice it (as `make_flip_families` does), so that every
    prompt's filler is a prefix of the next one's.
    """
    if n_tokens < 0:
        raise ValueError(f"n_tokens must be >= 0, got {n_tokens}")
    if family == PAD_FAMILY:
        if tokenizer.pad_token_id is None:
            raise ValueError("the filler family 'pad' needs a tokenizer with a pad token")
        return [tokenizer.pad_token_id] * n_tokens
    units = 1
    while True:
        ids = tokenizer(words.filler_text(family, units), add_special_tokens=False)["input_ids"]
        if len(ids) > n_tokens:  # one token of margin: the last token may merge with a next unit
            return list(ids[:n_tokens])
        units *= 2


def make_flip(
    context_ids: Sequence[int],
    filler_ids: Sequence[int],
    lengths: Sequence[int],
    prefix_ids: Sequence[int] = (),
    family: str = "",
    separator: Sequence[int] = (),
) -> FlipSet:
    """One prompt per filler length L in `lengths`: prefix + filler_ids[:L] + separator + context."""
    if not context_ids:
        raise ValueError("the context is empty")
    longest = max(lengths, default=0)
    if min(lengths, default=0) < 0 or longest > len(filler_ids):
        raise ValueError(f"filler lengths must lie in 0..{len(filler_ids)} (the filler stream's length)")
    prompts = []
    for length in lengths:
        ids = [*prefix_ids, *filler_ids[:length], *separator, *context_ids]
        prompts.append(FlipPrompt(ids, int(length), family, len(ids) - 1))
    options = {
        "family": family,
        "lengths": [int(x) for x in lengths],
        "prefix_length": len(prefix_ids),
        "separator_ids": list(separator),
        "context_length": len(context_ids),
    }
    return FlipSet(options=options, prompts=prompts)


def make_flip_families(
    tokenizer,
    context_ids: Sequence[int],
    lengths: Sequence[int],
    families: Sequence[str] | None = None,
    prefix_ids: Sequence[int] = (),
    separator: Sequence[int] = (),
) -> dict[str, FlipSet]:
    """`make_flip` for each family (default: all of `words.filler_families()`; `PAD_FAMILY` may be named too)."""
    chosen = words.filler_families() if families is None else tuple(families)
    longest = max(lengths, default=0)
    return {
        family: make_flip(
            context_ids, filler_stream(tokenizer, family, longest), lengths, prefix_ids, family, separator
        )
        for family in chosen
    }
