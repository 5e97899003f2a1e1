"""Record templates: the text around the words of lookup and needle prompts, tokenized in context.

A template writes each unit of a prompt (a record, a demonstration, the query, a padding token)
as text with word slots `{key}` and `{value}`; the space before a slot belongs to its words, so
" {key}" becomes " cat" (or " cat dog" for a two-token key). Keys are animals, values are names,
and needle haystacks are padded with filler words. `paper` is the paper's token layout
(records "cat Bob," and queries "; cat"); `natural` writes a list a pretrained model reads as
one ("cat: Bob, dog: Ann," and the query "cat:"); `sentence` writes English sentences ("The
owner of the cat is Bob.") and asks by repeating a sentence up to the name. On SmolLM2-135M-
Instruct (16 records) `natural` is answered far more often than `sentence` or `paper`: the
value follows the key almost at once, so copying after the key suffices.

Generators place token ids, so every unit must tokenize the same way wherever it occurs.
`compile_template` checks this on specimens: short texts in which every unit stands next to
every unit that can precede or follow it in a prompt. Literal text must split into tokens at
unit and slot boundaries, with the same ids in every specimen; a word is kept only when it is
one token in every context its slot has in the specimens (and is not a token of the template's
own text, so an answer occurs only where the records put it). `check_round_trip` then decodes
assembled prompts and re-encodes the text: the ids must come back unchanged.

Specimens and round trips start with a lead word (`PromptFormat.lead`, e.g. " the"), so every unit
is checked in its mid-text form: a SentencePiece tokenizer writes a text's first word with an
extra "▁", and a prompt's first unit (after BOS) keeps the ids it has everywhere else.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from phasekv.tasks import words
from phasekv.tasks.vocab import TaskVocab, single_token_ids

SLOT = re.compile(r" \{(key|value)\}")
# A lookup template's `pad` meaning one filler word per padding position (drawn per mapping). A pretrained model
# reads filler words as ordinary text, while a long run of one repeated pad token derails it: SmolLM2-135M-Instruct
# answered a natural list 79% of the time behind 32 filler words and 50% behind 32 " ." pads (48 prompts each).
FILLER_PAD = "{filler}"
CONTEXT_CHARS = 24  # text kept on each side of a word when it is checked in context


@dataclass(frozen=True)
class Template:
    """The texts of a prompt's units. `demo` (lookup only) is one demonstration; `pad` (lookup
    only) is the text of one padding token, or FILLER_PAD for filler words; needle haystacks are
    padded with filler words. The
    query must end with the record's text from `{key}` up to `{value}`, so that the answer
    follows the same tokens in the target record and at the end of the prompt."""

    name: str
    description: str
    record: str
    query: str
    demo: str = ""
    pad: str = ""


LOOKUP_TEMPLATES = {
    "paper": Template(
        "paper",
        "the paper's layout: records 'cat Bob,', demonstrations and query '; cat Bob ... ; dog', pads ' .'",
        record=" {key} {value},",
        demo="; {key} {value}",
        query="; {key}",
        pad=" .",
    ),
    "natural": Template(
        "natural",
        "a list: records 'cat: Bob,', the query 'cat:'",
        record=" {key}: {value},",
        demo=" {key}: {value},",
        query=" {key}:",
        pad=FILLER_PAD,
    ),
    "sentence": Template(
        "sentence",
        "sentences: records 'The owner of the cat is Bob.', the query repeats a sentence up to the name",
        record=" The owner of the {key} is {value}.",
        demo=" The owner of the {key} is {value}.",
        query=" The owner of the {key} is",
        pad=FILLER_PAD,
    ),
}

NEEDLE_TEMPLATES = {
    "paper": Template(
        "paper",
        "the paper's layout: records ', cat dog Bob Ann' in filler words, query '; cat dog'",
        record=", {key} {value}",
        query="; {key}",
    ),
    "natural": Template(
        "natural",
        "list entries in filler words: 'cat dog: Bob Ann,', query 'cat dog:'",
        record=" {key}: {value},",
        query=" {key}:",
    ),
    "sentence": Template(
        "sentence",
        "sentences in filler words: 'The owner of the cat dog is Bob Ann.', query repeats it up to the names",
        record=" The owner of the {key} is {value}.",
        query=" The owner of the {key} is",
    ),
}

TEMPLATES = {"lookup": LOOKUP_TEMPLATES, "needle": NEEDLE_TEMPLATES}
TEMPLATE_HELP = (  # the --template option of the commands that make lookup or needle prompts
    "record template: paper (the paper's token layout), natural ('cat: Bob,' lists, for pretrained LMs) "
    "or sentence ('The owner of the cat is Bob.')"
)


def get_template(probe: str, name: str, record_separator: bool = True) -> Template:
    """The `name` template of `probe` ("lookup" or "needle"); `record_separator=False` drops the
    paper layout's record separator (other templates have none to drop)."""
    chosen = TEMPLATES[probe]
    if name not in chosen:
        raise ValueError(f"unknown {probe} template {name!r}; choose one of {', '.join(chosen)}")
    template = chosen[name]
    if record_separator:
        return template
    if name != "paper":
        raise ValueError(f"record_separator=False applies to the paper template only, not {name!r}")
    return replace(template, record=template.record.replace(",", ""))


Segment = tuple[int, ...] | str  # literal token ids, or a slot name: "key", "value"


@dataclass(frozen=True)
class Unit:
    """One unit of a prompt as token ids with slots; a slot takes `sizes[slot]` tokens."""

    segments: tuple[Segment, ...]

    def length(self, sizes: dict[str, int]) -> int:
        return sum(sizes[s] if isinstance(s, str) else len(s) for s in self.segments)

    def offset(self, slot: str, sizes: dict[str, int]) -> int:
        """Tokens before the first token of `slot`."""
        i = self.segments.index(slot)
        return Unit(self.segments[:i]).length(sizes)

    def render(self, fills: dict[str, np.ndarray]) -> np.ndarray:
        """Rows [R, length] from the slot fills, each [R] or [R, tokens of that slot]."""
        fills = {slot: np.asarray(ids) for slot, ids in fills.items()}
        fills = {slot: ids[:, None] if ids.ndim == 1 else ids for slot, ids in fills.items()}
        rows = len(next(iter(fills.values())))
        columns = [fills[s] if isinstance(s, str) else np.tile(np.asarray(s), (rows, 1)) for s in self.segments]
        return np.concatenate(columns, axis=1).astype(np.int64)


@dataclass(frozen=True)
class PromptFormat:
    """A template compiled for one tokenizer: its units as ids, and the words usable in it."""

    template: str
    words: TaskVocab
    record: Unit
    query: Unit
    demo: Unit | None
    pad_id: int | None
    key_tokens: int = 1
    value_tokens: int = 1
    lead: str = ""
    filler_pad: bool = False  # lookup padding is filler words (`words.filler_ids`), not `pad_id`

    @property
    def sizes(self) -> dict[str, int]:
        return {"key": self.key_tokens, "value": self.value_tokens}

    @property
    def record_length(self) -> int:
        return self.record.length(self.sizes)

    @property
    def key_offset(self) -> int:
        """Tokens of a record before its key (t_K = record start + key_offset)."""
        return self.record.offset("key", self.sizes)

    @property
    def answer_offset(self) -> int:
        """Tokens from the key's first token to the value's: the key phrase the query ends with."""
        return self.record.offset("value", self.sizes) - self.key_offset

    def describe(self) -> dict:
        """JSON record of the layout."""
        return {
            "template": self.template,
            "record_length": self.record_length,
            "key_offset": self.key_offset,
            "answer_offset": self.answer_offset,
            "query_length": self.query.length(self.sizes),
            "padding_text": "filler words, drawn per unit" if self.filler_pad else "one repeated pad token",
        }


def paper_format(vocab: TaskVocab, probe: str, record_separator: bool = True, key_tokens=1, value_tokens=1):
    """The paper template from `task_vocab`'s ids (no tokenizer needed; `compile_template` of the
    paper template gives the same units)."""
    sep = (vocab.record_sep_id,) if record_separator else ()
    query = Unit(((vocab.query_sep_id,), "key"))
    if probe == "lookup":
        record, demo = Unit(("key", "value", *([sep] if sep else []))), Unit(((vocab.query_sep_id,), "key", "value"))
        return PromptFormat("paper", vocab, record, query, demo, vocab.pad_id, key_tokens, value_tokens)
    record = Unit((*([sep] if sep else []), "key", "value"))
    return PromptFormat("paper", vocab, record, query, None, None, key_tokens, value_tokens)


def _parse(text: str) -> list[str]:
    """Split a unit's text into literal pieces and slot names ("key", "value")."""
    parts = SLOT.split(text)  # literal, slot, literal, slot, ..., literal
    return [p if i % 2 else "=" + p for i, p in enumerate(parts) if i % 2 or p]


def tokenizer_name(tokenizer) -> str:
    """A name for error messages: the tokenizer's path or class, and its size."""
    return f"{getattr(tokenizer, 'name_or_path', '') or type(tokenizer).__name__} ({len(tokenizer)} tokens)"


class _Specimen:
    """A text built unit by unit, remembering where each literal piece and each word lies."""

    def __init__(self, lead: str) -> None:
        self.text = lead
        self.literals: list[tuple[str, int, int, int]] = []  # (unit, piece index, start, end)
        self.slots: list[tuple[str, int, int]] = []  # (slot, start, end)

    def add(self, unit: str, parts: list[str], samples: dict[str, str], sizes: dict[str, int]) -> None:
        for index, part in enumerate(parts):
            if part.startswith("="):
                self.literals.append((unit, index, len(self.text), len(self.text) + len(part) - 1))
                self.text += part[1:]
                continue
            for _ in range(sizes[part]):
                piece = " " + samples[part]
                self.slots.append((part, len(self.text), len(self.text) + len(piece)))
                self.text += piece


def _tokens_in(ids, offsets, start: int, end: int) -> list[int] | None:
    """Ids of the tokens inside text [start, end), or None if a token straddles either edge."""
    inside = []
    for tok_id, (s, e) in zip(ids, offsets, strict=True):
        if s < start < e or s < end < e:
            return None
        if start <= s and e <= end and (e > s or s < end):
            inside.append(tok_id)
    return inside


# Unit sequences in which every unit follows every unit that can precede it in a prompt.
SPECIMENS = {
    "lookup": (
        ("record", "record", "pad", "pad", "record", "pad", "demo", "demo", "query"),
        ("pad", "record", "demo", "query"),
        ("record", "query"),
        ("pad", "query"),
    ),
    "needle": (("record", "record", "filler", "filler", "record", "filler", "query"), ("filler", "record", "query")),
}


def compile_template(
    tokenizer, template: Template, probe: str, key_tokens: int = 1, value_tokens: int = 1
) -> PromptFormat:
    """Tokenize `template` in context for `tokenizer` (a fast HF tokenizer); see the module
    docstring. Raises ValueError naming the tokenizer and template when a literal piece does not
    split at its boundaries or tokenizes differently in different places."""
    name = tokenizer_name(tokenizer)
    sizes = {"key": key_tokens, "value": value_tokens, "filler": 1}
    units = {"record": _parse(template.record), "query": _parse(template.query)}
    if probe == "lookup":
        pad = ["filler"] if template.pad == FILLER_PAD else ["=" + template.pad]
        units |= {"demo": _parse(template.demo), "pad": pad}
    else:
        units["filler"] = ["filler"]
    phrase_length = _check_layout(template, units)
    candidates = {"key": words.animals(), "value": words.names(), "filler": words.filler_words()}
    samples = {slot: _sample_word(tokenizer, pool, slot, name) for slot, pool in candidates.items()}
    lead = " " + samples["filler"]
    specimens = []
    for sequence in SPECIMENS[probe]:
        specimen = _Specimen(lead)
        for unit in sequence:
            specimen.add(unit, units[unit], samples, sizes)
        specimens.append(specimen)
    encoded = tokenizer([s.text for s in specimens], add_special_tokens=False, return_offsets_mapping=True)
    literal_ids: dict[tuple[str, int], tuple[int, ...]] = {}
    for specimen, ids, offsets in zip(specimens, encoded["input_ids"], encoded["offset_mapping"], strict=True):
        for unit, index, start, end in specimen.literals:
            found = _tokens_in(ids, offsets, start, end)
            piece = specimen.text[start:end]
            where = f"{specimen.text[max(0, start - 12) : end + 12]!r}"
            if not found:
                raise ValueError(
                    f"the {template.name} template's {unit} text {piece!r} does not split into its own tokens in "
                    f"{where} with tokenizer {name}; choose another template (--template)"
                )
            if tokenizer.unk_token_id in found:
                raise ValueError(
                    f"the {template.name} template's {unit} text {piece!r} holds words unknown to tokenizer {name}; "
                    "choose another template (--template)"
                )
            before = literal_ids.setdefault((unit, index), tuple(found))
            if before != tuple(found):
                raise ValueError(
                    f"the {template.name} template's {unit} text {piece!r} tokenizes as "
                    f"{tokenizer.convert_ids_to_tokens(list(before))} in one place and as "
                    f"{tokenizer.convert_ids_to_tokens(found)} in {where} with tokenizer {name}; "
                    "choose another template (--template)"
                )
    compiled = {  # literal pieces replaced by their ids
        unit: Unit(tuple(literal_ids[(unit, i)] if p.startswith("=") else p for i, p in enumerate(parts)))
        for unit, parts in units.items()
    }
    phrase = compiled["record"].segments[compiled["record"].segments.index("key") :][:phrase_length]
    if compiled["query"].segments[-phrase_length:] != phrase:
        raise ValueError(
            f"the {template.name} template's query ends in other tokens than its records' key phrase "
            f"with tokenizer {name}; choose another template (--template)"
        )
    template_ids = {tok for ids in literal_ids.values() for tok in ids}
    kept = {slot: _words_in_context(tokenizer, candidates[slot], specimens, slot, template_ids) for slot in candidates}
    pad_id = None
    filler_pad = probe == "lookup" and template.pad == FILLER_PAD
    if filler_pad:  # padding words must not be keys or answers
        answers = set(kept["key"].values()) | set(kept["value"].values())
        kept["filler"] = {word: i for word, i in kept["filler"].items() if i not in answers}
    elif probe == "lookup":
        pad = compiled["pad"].segments[0]
        if len(pad) != 1:
            raise ValueError(
                f"the {template.name} template's padding text {template.pad!r} is {len(pad)} tokens with tokenizer "
                f"{name}; padding must be one token per position"
            )
        pad_id = pad[0]
    vocab = TaskVocab(
        animal_words=tuple(kept["key"]),
        animal_ids=tuple(kept["key"].values()),
        name_words=tuple(kept["value"]),
        name_ids=tuple(kept["value"].values()),
        filler_ids=tuple(kept["filler"].values()),
        pad_id=pad_id,
        record_sep_id=None,
        query_sep_id=None,
    )
    demo = compiled.get("demo")
    return PromptFormat(
        template.name,
        vocab,
        compiled["record"],
        compiled["query"],
        demo,
        pad_id,
        key_tokens,
        value_tokens,
        lead,
        filler_pad,
    )


def _check_layout(template: Template, units: dict[str, list[str]]) -> int:
    """Check the record's slots and that the query ends with the record's key phrase; returns the
    key phrase's length in segments."""
    record = units["record"]
    if record.count("key") != 1 or record.count("value") != 1 or record.index("key") > record.index("value"):
        raise ValueError(f"the {template.name} template's record must hold {{key}} once, then {{value}} once")
    phrase = record[record.index("key") : record.index("value")]
    if units["query"][-len(phrase) :] != phrase:
        raise ValueError(
            f"the {template.name} template's query {template.query!r} must end with the record's text from "
            f"{{key}} to {{value}}, so that the answer follows the same tokens in the record and the query"
        )
    return len(phrase)


def _sample_word(tokenizer, pool: Sequence[str], slot: str, name: str) -> str:
    """The first word of `pool` that is one token after a space (stands in for any word in specimens)."""
    found = single_token_ids(tokenizer, [" " + w for w in pool], left="", right="")
    for word in pool:
        if " " + word in found:
            return word
    raise ValueError(f"no {slot} word is a single token with tokenizer {name}")


def _words_in_context(tokenizer, pool, specimens, slot: str, exclude: set[int]) -> dict[str, int]:
    """{word: id} for the words of `pool` that are one token in every context `slot` has in the
    specimens, with distinct ids not in `exclude` (first word wins)."""
    contexts = {
        (s.text[max(0, start - CONTEXT_CHARS) : start], s.text[end : end + CONTEXT_CHARS])
        for s in specimens
        for kind, start, end in s.slots
        if kind == slot
    }
    pieces = [" " + w for w in pool]
    ids: dict[str, int] | None = None
    for left, right in sorted(contexts):
        found = single_token_ids(tokenizer, pieces, left=left, right=right)
        ids = found if ids is None else {p: i for p, i in ids.items() if found.get(p) == i}
    kept: dict[str, int] = {}
    for word in pool:
        tok_id = (ids or {}).get(" " + word)
        if tok_id is not None and tok_id not in exclude and tok_id not in kept.values():
            kept[word] = tok_id
    return kept


def check_round_trip(
    tokenizer, prompts: Sequence, prefix_length: int, template: str, limit: int = 64, lead: str = ""
) -> None:
    """Decode up to `limit` prompts (evenly spaced) after their prefix, with the text `lead` in
    front, and re-encode the text; raise ValueError naming tokenizer and template unless the ids
    come back unchanged."""
    if not prompts:
        return
    lead_ids = list(tokenizer(lead, add_special_tokens=False)["input_ids"]) if lead else []
    picks = sorted({int(i) for i in np.linspace(0, len(prompts) - 1, min(limit, len(prompts)))})
    for i in picks:
        ids = lead_ids + list(prompts[i].input_ids[prefix_length:])
        text = tokenizer.decode(ids, clean_up_tokenization_spaces=False)
        again = tokenizer(text, add_special_tokens=False)["input_ids"]
        if again != ids:
            at = next(
                (j for j, (a, b) in enumerate(zip(ids, again, strict=False)) if a != b), min(len(ids), len(again))
            )
            raise ValueError(
                f"the {template} template's prompts do not survive decoding and re-encoding with tokenizer "
                f"{tokenizer_name(tokenizer)}: from token {at} the prompt holds "
                f"{tokenizer.convert_ids_to_tokens(ids[at : at + 4])} but its text encodes as "
                f"{tokenizer.convert_ids_to_tokens(again[at : at + 4])}; choose another template (--template)"
            )
