"""The position-matched needle test (paper, "A position-matched needle test").

Token layout (ids; P = len(prefix_ids)):

    prefix | filler | , k_1 k_2 v_1 v_2 | filler | , k_1 k_2 v_1 v_2 | ... | filler | ; q_1 q_2

In the `paper` template each record is the record separator, a key of `key_tokens` animal tokens
and a value of `value_tokens` name tokens (defaults 2 + 2: the paper's four-token key–value
records; the separator is extra and can be dropped with `record_separator=False`). Other
templates (`templates.NEEDLE_TEMPLATES`, e.g. `natural`: "The cat dog room belongs to Bob Ann.")
write records as other text, and the query ends with the record's text from the key up to the
value. Keys are distinct within a haystack, and so are values (so the answer occurs once). The
haystack's remaining tokens are filler words, split into the gaps around the records by the
padding protocol (`in-sequence`: random gaps; `prefix`: all filler before and after the
records). The query repeats the target key after the query separator; the answer is the whole
value. t_K is the position of the target key's first token; the query position is
`context_length - 1` for every prompt.

The target is the middle record; target positions follow `placement.moment_matched_design`
(exact equal mean and variance of t_K across residue groups), centred in the context. A
haystack's content is fixed by (seed, split, haystack) and placed at every residue. Prompts are
built on access (a 128K-token prompt takes milliseconds), so a run at the paper's scale never
holds all prompts in memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from phasekv.tasks import layout, placement
from phasekv.tasks.prompts import PlacedPrompts, Prompt, PromptSet, content_rng, placement_rng
from phasekv.tasks.templates import PromptFormat, check_round_trip, compile_template, get_template, paper_format
from phasekv.tasks.vocab import TaskVocab


@dataclass(frozen=True)
class NeedleOptions:
    """Options of a needle run (JSON-serialisable through `dataclasses.asdict`).

    `context_length` counts every token of a prompt, prefix and query included;
    `placements_per_haystack` None picks the fewest that make the residue groups exact;
    `template` names the record template (`templates.NEEDLE_TEMPLATES`).
    `spread_blocks` 6 makes target positions span 8 x modulus tokens, enough periods for the
    phase verdict (`stats.phase_verdict`) to tell the phase frequencies from their neighbours.
    """

    context_length: int = 4096
    n_records: int = 512
    key_tokens: int = 2
    value_tokens: int = 2
    modulus: int = 8
    n_haystacks: int = 64
    placements_per_haystack: int | None = None
    protocol: str = "in-sequence"
    spread_blocks: int = 6
    record_separator: bool = True
    seed: int = 0
    split: str = "eval"
    template: str = "paper"


@dataclass(frozen=True)
class Haystack:
    """The content of one needle unit: keys and values (one row per record) and filler ids."""

    keys: np.ndarray
    values: np.ndarray
    filler: np.ndarray


class NeedlePrompts(PlacedPrompts):
    """The prompts of a needle run, built on access; index order is (haystack, residue, placement)."""

    def __init__(self, vocab: TaskVocab | PromptFormat, options: NeedleOptions, prefix_ids: Sequence[int] = ()):
        o = options
        layout.check_protocol(o.protocol)
        if min(o.n_records, o.key_tokens, o.value_tokens, o.n_haystacks, o.modulus) < 1:
            raise ValueError("n_records, key_tokens, value_tokens, n_haystacks and modulus must be >= 1")
        self.form = _format(vocab, o)
        vocab = self.form.words
        for kind, pool, tokens in (
            ("animals", vocab.animal_ids, o.key_tokens),
            ("names", vocab.name_ids, o.value_tokens),
        ):
            if len(pool) ** tokens < o.n_records:
                what = "keys" if kind == "animals" else "values"
                raise ValueError(
                    f"{len(pool)} {kind} give only {len(pool) ** tokens} distinct {tokens}-token {what}, "
                    f"fewer than the {o.n_records} records"
                )
        if not vocab.filler_ids:
            raise ValueError("the vocabulary has no single-token filler words")
        self.vocab, self.options, self.prefix_ids = vocab, o, list(prefix_ids)
        self.key_offset = self.form.key_offset
        self.record_length = self.form.record_length
        self.query_length = self.form.query.length(self.form.sizes)
        start = len(self.prefix_ids)
        self.filler_length = o.context_length - start - o.n_records * self.record_length - self.query_length
        self.design = placement.moment_matched_design(o.modulus, o.spread_blocks)
        if self.filler_length < self.design.span:
            raise ValueError(
                f"context_length {o.context_length} leaves {self.filler_length} filler tokens, fewer than "
                f"the {self.design.span} the position design spans; raise context_length or lower n_records"
            )
        self.target = o.n_records // 2
        centre = (self.filler_length - self.design.span) // 2 - self.design.low
        self.origin = start + self.target * self.record_length + self.key_offset + centre
        self.deal(self.design, self.origin, o.n_haystacks, o.placements_per_haystack, o.seed, o.split, "haystack")

    def haystack(self, unit: int) -> Haystack:
        """Content of haystack `unit`, reproducible from (seed, split, unit) alone."""
        o, v = self.options, self.vocab
        rng = content_rng(o.seed, o.split, unit)
        keys = _distinct_tuples(rng, np.asarray(v.animal_ids), o.n_records, o.key_tokens)
        values = _distinct_tuples(rng, np.asarray(v.name_ids), o.n_records, o.value_tokens)
        filler = rng.choice(np.asarray(v.filler_ids), size=self.filler_length)
        return Haystack(keys=keys, values=values, filler=filler)

    def build(self, unit: int, residue: int, placement_index: int) -> Prompt:
        """The prompt of haystack `unit` placed at its `placement_index`-th position of `residue`."""
        o = self.options
        t = int(self.dealt[residue][unit, placement_index])
        hay = self.haystack(unit)
        start = len(self.prefix_ids)
        before = t - start - self.target * self.record_length - self.key_offset
        gaps = placement_rng(o.seed, o.split, 1, unit, residue, placement_index)
        slots = layout.padding_slots(o.protocol, o.n_records, self.target, before, self.filler_length, gaps)
        records = self.form.record.render({"key": hay.keys, "value": hay.values})
        ids = np.empty(o.context_length, dtype=np.int64)
        ids[:start] = self.prefix_ids
        record_starts = start + np.cumsum(slots[: o.n_records]) + self.record_length * np.arange(o.n_records)
        is_filler = np.ones(o.context_length, dtype=bool)
        is_filler[:start] = False
        is_filler[-self.query_length :] = False
        record_positions = record_starts[:, None] + np.arange(self.record_length)
        is_filler[record_positions] = False
        ids[record_positions] = records
        ids[is_filler] = hay.filler
        ids[-self.query_length :] = self.form.query.render({"key": hay.keys[[self.target]]})[0]
        return self.prompt(ids, hay.values[self.target], unit, residue, placement_index)

    def record(self) -> dict:
        """The options with every derived setting, for a results file."""
        return {
            **asdict(self.options),
            **self.form.describe(),
            "filler_length": self.filler_length,
            "prefix_length": len(self.prefix_ids),
            "target_record": self.target,
            **self.design_record(),
            "query_position": self.options.context_length - 1,
        }


def _distinct_tuples(rng: np.random.Generator, pool: np.ndarray, n: int, tokens: int) -> np.ndarray:
    """[n, tokens] ids from `pool`: n distinct tuples drawn without replacement."""
    codes = rng.choice(len(pool) ** tokens, size=n, replace=False)
    digits = (codes[:, None] // len(pool) ** np.arange(tokens)[::-1]) % len(pool)
    return pool[digits]


def _format(source: TaskVocab | PromptFormat, options: NeedleOptions) -> PromptFormat:
    if isinstance(source, PromptFormat):
        if source.template != options.template or (source.key_tokens, source.value_tokens) != (
            options.key_tokens,
            options.value_tokens,
        ):
            raise ValueError("the prompt format was compiled for another template or key/value length than the options")
        return source
    if options.template != "paper":
        raise ValueError(f"the {options.template!r} template must be compiled for the tokenizer: use needle_format")
    return paper_format(source, "needle", options.record_separator, options.key_tokens, options.value_tokens)


def needle_format(tokenizer, options: NeedleOptions) -> PromptFormat:
    """`options.template` compiled for `tokenizer` (`templates.compile_template`)."""
    template = get_template("needle", options.template, options.record_separator)
    return compile_template(tokenizer, template, "needle", options.key_tokens, options.value_tokens)


def needle_prompts(tokenizer, options: NeedleOptions, prefix_ids: Sequence[int] = ()) -> PromptSet:
    """`make_needle` with the template compiled for `tokenizer`; the prompts' text must re-encode to
    the same ids (`templates.check_round_trip`)."""
    form = needle_format(tokenizer, options)
    prompt_set = make_needle(form, options, prefix_ids)
    check_round_trip(tokenizer, prompt_set.prompts, len(prefix_ids), options.template, limit=16, lead=form.lead)
    return prompt_set


def make_needle(
    vocab: TaskVocab | PromptFormat, options: NeedleOptions = NeedleOptions(), prefix_ids: Sequence[int] = ()
) -> PromptSet:
    """All needle prompts of a run (built lazily): n_haystacks x modulus x placements_per_haystack.

    `vocab` is a compiled template (`needle_format`), or for the paper template `task_vocab`'s ids."""
    prompts = NeedlePrompts(vocab, options, prefix_ids)
    stats = prompts.position_stats(options.context_length - 1)
    return PromptSet(task="needle", options=prompts.record(), prompts=prompts, position_stats=stats)
