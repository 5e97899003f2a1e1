"""Passkey retrieval prompts with exact token positions.

Token layout (ids; P = len(prefix_ids)):

    prefix | filler | The pass key is 71432. Remember it. 71432 is the pass key. | filler | What is ... The pass key is

t_K is the position of the key phrase's first token (the needle's text before its first digit, "The pass key is");
the key's digits follow it at `answer_offset`, and the prompt ends with the same key phrase, so the answer is the
key's tokens (all must be produced). The query position is `context_length - 1` for every prompt.

Positions follow the needle's design: `placement.moment_matched_design` (exactly equal mean and variance of t_K
across residue groups), centred in the filler, each haystack placed at every residue and its positions dealt by
`placement.assign`. A haystack's key is fixed by (seed, split, haystack). The filler is the template's text
repeated; in each prompt the filler before the passkey and the filler after it start at offsets of their own
(drawn from its placement; after it, only where the filler's tokens survive following the passkey's), so the text
next to the passkey is no function of t_K and the filler's period cannot line up with the residues.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from phasekv.tasks import placement
from phasekv.tasks.prompts import PlacedPrompts, Prompt, PromptSet, content_rng, placement_rng
from phasekv.tasks.templates import check_round_trip, tokenizer_name

from .options import TEMPLATES, PasskeyOptions, PasskeyTemplate

LEAD = " the"  # texts are tokenized after a word, so each piece has its mid-text ids (see `tasks.templates`)


@dataclass(frozen=True)
class PasskeyFormat:
    """A template tokenized for one tokenizer: the filler's ids (one period), the key phrase's and the question's
    (which ends with the key phrase)."""

    template: PasskeyTemplate
    filler: tuple[int, ...]
    phrase: tuple[int, ...]
    question: tuple[int, ...]
    tokenizer: object

    def needle(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """(the needle's ids, the answer's ids) for the key `key`: the answer is the ids that follow the key phrase."""
        ids = _ids(self.tokenizer, self.template.needle.format(key=key), self.template.name)
        with_key = _ids(self.tokenizer, self.template.before_key + key, self.template.name)
        answer = with_key[len(self.phrase) :]
        if tuple(with_key[: len(self.phrase)]) != self.phrase or ids[: len(with_key)] != with_key or not answer:
            raise ValueError(
                f"the {self.template.name} passkey template's key {key!r} does not tokenize on its own after the key "
                f"phrase with tokenizer {tokenizer_name(self.tokenizer)}; choose another template (--template)"
            )
        return np.asarray(ids), np.asarray(answer)


def _ids(tokenizer, text: str, template: str) -> list[int]:
    """The ids of `text` as it reads after a word; ValueError when a word is unknown to the tokenizer."""
    lead = tokenizer(LEAD, add_special_tokens=False)["input_ids"]
    ids = tokenizer(LEAD + text, add_special_tokens=False)["input_ids"]
    if ids[: len(lead)] != lead or (tokenizer.unk_token_id is not None and tokenizer.unk_token_id in ids):
        raise ValueError(
            f"the {template} passkey template's text {text[:40]!r} holds words unknown to tokenizer "
            f"{tokenizer_name(tokenizer)} (or does not split after a word); choose another template (--template)"
        )
    return ids[len(lead) :]


def passkey_format(tokenizer, options: PasskeyOptions) -> PasskeyFormat:
    """`options.template` tokenized for `tokenizer`; with no template, the first of `TEMPLATES` it can write."""
    if options.template is not None:
        return _format(tokenizer, TEMPLATES[options.template])
    errors = []
    for template in TEMPLATES.values():
        try:
            return _format(tokenizer, template)
        except ValueError as err:
            errors.append(str(err))
    raise ValueError("no passkey template suits this tokenizer: " + "; ".join(errors))


def _format(tokenizer, template: PasskeyTemplate) -> PasskeyFormat:
    phrase = _ids(tokenizer, template.before_key.rstrip(), template.name)
    question = _ids(tokenizer, template.question, template.name)
    if tuple(question[-len(phrase) :]) != tuple(phrase):
        raise ValueError(
            f"the {template.name} passkey template's question does not end in the key phrase's tokens with "
            f"tokenizer {tokenizer_name(tokenizer)}; choose another template (--template)"
        )
    filler = _ids(tokenizer, template.filler, template.name)
    return PasskeyFormat(template, tuple(filler), tuple(phrase), tuple(question), tokenizer)


class PasskeyPrompts(PlacedPrompts):
    """The prompts of a passkey run, built on access; index order is (haystack, residue, placement)."""

    def __init__(self, form: PasskeyFormat, options: PasskeyOptions, prefix_ids: Sequence[int] = ()):
        o = options
        self.form, self.options, self.prefix_ids = form, o, list(prefix_ids)
        keys = [_key(o, unit) for unit in range(o.n_haystacks)]
        self.needles = [form.needle(key) for key in keys]
        start = len(self.prefix_ids)
        longest = max(len(ids) for ids, _ in self.needles)
        self.filler_length = o.context_length - start - longest - len(form.question)
        self.design = placement.moment_matched_design(o.modulus, o.spread_blocks)
        if self.filler_length < self.design.span:
            raise ValueError(
                f"context_length {o.context_length} leaves {self.filler_length} filler tokens beside the passkey and "
                f"the question, fewer than the {self.design.span} the position design spans; raise context_length"
            )
        self.origin = start + (self.filler_length - self.design.span) // 2 - self.design.low
        self.resumes = _resumes(form, self.needles[0][0])
        self.deal(self.design, self.origin, o.n_haystacks, o.placements_per_haystack, o.seed, o.split, "haystack")

    def build(self, unit: int, residue: int, placement_index: int) -> Prompt:
        """The prompt of haystack `unit` with its passkey at its `placement_index`-th position of `residue`."""
        o, form = self.options, self.form
        t = int(self.dealt[residue][unit, placement_index])
        needle, answer = self.needles[unit]
        start = len(self.prefix_ids)
        filler = o.context_length - start - len(needle) - len(form.question)
        rng = placement_rng(o.seed, o.split, 1, unit, residue, placement_index)
        before = t - start
        head = _filler(form.filler, int(rng.integers(len(form.filler))), before)
        tail = _filler(form.filler, int(rng.choice(self.resumes)), filler - before)
        ids = np.concatenate([self.prefix_ids, head, needle, tail, form.question])
        return self.prompt(ids, answer, unit, residue, placement_index)

    def record(self) -> dict:
        """The options with every derived setting, for a results file."""
        return {
            **asdict(self.options),
            "template": self.form.template.name,
            **self.design_record(),
            "answer_offset": len(self.form.phrase),
            "query_length": len(self.form.question),
            "filler_period": len(self.form.filler),
            "filler_length": self.filler_length,
            "prefix_length": len(self.prefix_ids),
            "query_position": self.options.context_length - 1,
        }


def _filler(period: tuple[int, ...], offset: int, length: int) -> np.ndarray:
    """`length` ids of the filler repeated, starting at `offset` in its period."""
    periods = -(-(offset + length) // len(period))
    return np.tile(np.asarray(period), periods)[offset : offset + length]


def _resumes(form: PasskeyFormat, needle: np.ndarray) -> list[int]:
    """The offsets in the filler's period where filler may follow the passkey sentence: those whose text, decoded
    after the sentence's last tokens, encodes to the same ids ("key." then ". There" would read "key.. There")."""
    tokenizer, period = form.tokenizer, list(form.filler)
    lead = tokenizer(LEAD, add_special_tokens=False)["input_ids"]
    found = []
    for offset in range(len(period)):
        ids = [*lead, *needle[-3:].tolist(), *(period * 2)[offset : offset + 3]]
        text = tokenizer.decode(ids, clean_up_tokenization_spaces=False)
        if tokenizer(text, add_special_tokens=False)["input_ids"] == ids:
            found.append(offset)
    if not found:
        raise ValueError(
            f"the {form.template.name} passkey template's filler cannot follow its passkey sentence with tokenizer "
            f"{tokenizer_name(tokenizer)} (their tokens merge); choose another template (--template)"
        )
    return found


def _key(options: PasskeyOptions, unit: int) -> str:
    """The passkey of haystack `unit`: `digits` digits, the first not 0, from (seed, split, unit) alone."""
    rng = content_rng(options.seed, options.split, unit)
    return str(int(rng.integers(10 ** (options.digits - 1), 10**options.digits)))


def passkey_prompts(tokenizer, options: PasskeyOptions, prefix_ids: Sequence[int] = ()) -> PromptSet:
    """All passkey prompts of a run (built lazily): n_haystacks x modulus x placements_per_haystack; the prompts'
    text must re-encode to the same ids (`templates.check_round_trip`)."""
    prompts = PasskeyPrompts(passkey_format(tokenizer, options), options, prefix_ids)
    name = prompts.form.template.name
    check_round_trip(tokenizer, prompts, len(prefix_ids), f"{name} passkey", limit=16, lead=LEAD)
    stats = prompts.position_stats(options.context_length - 1)
    return PromptSet(task="passkey", options=prompts.record(), prompts=prompts, position_stats=stats)
