"""The passkey probe's options (the only place their defaults live) and its templates; no torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PasskeyTemplate:
    """The texts of a passkey prompt: `filler` repeated around the passkey sentence `needle`, whose `{key}` slots
    take the key's digits, and the question at the end, which ends with the needle's text before its first
    `{key}` (the key phrase), so that the answer follows the same tokens in the needle and at the prompt's end."""

    name: str
    description: str
    filler: str
    needle: str
    question: str

    @property
    def before_key(self) -> str:
        """The needle's text before its first `{key}`: the key phrase and the space that leads the key."""
        return self.needle.split("{key}")[0]


TEMPLATES = {
    "standard": PasskeyTemplate(
        "standard",
        "the usual passkey retrieval text: 'The grass is green. The sky is blue. ...' around 'The pass key is "
        "71432. Remember it. 71432 is the pass key.', asked 'What is the pass key? The pass key is'",
        filler=" The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.",
        needle=" The pass key is {key}. Remember it. {key} is the pass key.",
        question=" What is the pass key? The pass key is",
    ),
    # For word-level tokenizers (phasekv's own models) that know only the words of the task lists.
    "plain": PasskeyTemplate(
        "plain",
        "the words of phasekv's own tokenizer: a prose filler around 'the number is 7 1 4 3 2 .', asked 'what is "
        "the number ? the number is'",
        filler=" the old house stood at the end of a long road near the river and every morning the light came in "
        "through the open door .",
        needle=" the number is {key} .",
        question=" what is the number ? the number is",
    ),
}


@dataclass(frozen=True)
class PasskeyOptions:
    """Options of a passkey run (JSON-serialisable through `dataclasses.asdict`).

    Every haystack (the bootstrap unit) hides one passkey of `digits` digits (seeded by `seed`, `split` and the
    haystack) in `context_length` tokens of filler, prefix and question included, and is placed at every residue
    mod `modulus` by the moment-matched design (`spread_blocks` blocks of M); `placements_per_haystack` None
    picks the fewest that make the residue groups exact. `template` names the text (`TEMPLATES`; None: the
    first whose words the tokenizer knows, "standard" for a pretrained LM)."""

    context_length: int = 1024
    digits: int = 5
    n_haystacks: int = 32
    placements_per_haystack: int | None = None
    modulus: int = 8
    spread_blocks: int = 6
    template: str | None = None
    seed: int = 0
    split: str = "eval"

    def __post_init__(self) -> None:
        if self.template is not None and self.template not in TEMPLATES:
            raise ValueError(f"unknown passkey template {self.template!r}; choose one of {', '.join(TEMPLATES)}")
        if not 1 <= self.digits <= 18:  # an int64 holds every key of up to 18 digits
            raise ValueError(f"digits must be in 1..18, got {self.digits}")
        if min(self.n_haystacks, self.modulus, self.spread_blocks) < 1:
            raise ValueError("n_haystacks, modulus and spread_blocks must be >= 1")
