"""Token ids the generators use, for any Hugging Face fast tokenizer.

Generators work on token ids only, so every word they place must be exactly one token *in the
context where it appears*. `single_token_ids` checks this by encoding the word inside a context
string and reading the token boundaries (offsets): the word, with its leading space, must be
covered by exactly one token that neither reaches into the left nor into the right context.
This is stricter than `len(encode(" cat")) == 1`, which misses tokenizers that merge across
the space or attach the space to the previous token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

LEFT_CONTEXT = "x,"
RIGHT_CONTEXT = " y"


def single_token_ids(
    tokenizer, pieces: Sequence[str], left: str = LEFT_CONTEXT, right: str = RIGHT_CONTEXT
) -> dict[str, int]:
    """Map each piece (e.g. " cat") that is one token between `left` and `right` to its id.

    Pieces that split into several tokens, whose token also covers context characters, or
    that map to a special token (e.g. <unk>) are left out. The tokenizer must be a fast
    (Rust-backed) tokenizer, which reports offsets.
    """
    if not getattr(tokenizer, "is_fast", False):
        raise TypeError("single_token_ids needs a fast tokenizer (PreTrainedTokenizerFast) for offsets")
    special = set(tokenizer.all_special_ids)
    texts = [left + piece + right for piece in pieces]
    enc = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
    found: dict[str, int] = {}
    for piece, ids, offsets in zip(pieces, enc["input_ids"], enc["offset_mapping"], strict=True):
        start, end = len(left), len(left) + len(piece)
        inside = [
            (tok_id, (s, e)) for tok_id, (s, e) in zip(ids, offsets, strict=True) if e > s and s < end and e > start
        ]
        if len(inside) == 1:
            tok_id, (s, e) = inside[0]
            if s >= start and e == end and tok_id not in special:
                found[piece] = tok_id
    return found


@dataclass(frozen=True)
class TaskVocab:
    """The token ids of everything a prompt contains.

    Animal and name ids are distinct single tokens; `pad_id` is the padding token of the lookup
    protocols, `record_sep_id` ends each record and `query_sep_id` opens each demonstration and
    the query (in the paper's layout; None for templates without them, `templates`); `filler_ids`
    fill the needle haystack.
    """

    animal_words: tuple[str, ...]
    animal_ids: tuple[int, ...]
    name_words: tuple[str, ...]
    name_ids: tuple[int, ...]
    filler_ids: tuple[int, ...]
    pad_id: int | None
    record_sep_id: int | None
    query_sep_id: int | None

    def require(self, n_animals: int, n_names: int) -> None:
        """Raise ValueError unless at least `n_animals` animals and `n_names` names are available."""
        for kind, have, need in (
            ("animals", len(self.animal_ids), n_animals),
            ("names", len(self.name_ids), n_names),
        ):
            if have < need:
                raise ValueError(
                    f"only {have} {kind} are single tokens in context for this tokenizer, "
                    f"but the prompt needs {need} distinct {kind}"
                )


def task_vocab(
    tokenizer,
    *,
    n_animals: int = 0,
    n_names: int = 0,
    record_sep: str = ",",
    query_sep: str = ";",
    pad: str = " .",
) -> TaskVocab:
    """The words and separators of the paper's layout (`templates.LOOKUP_TEMPLATES["paper"]` and
    the needle's), each checked in every context where it occurs in a prompt.

    Words are kept when they are one token (with their leading space) wherever a lookup or needle
    prompt puts them; the separators and the pad must be one token each. Raises ValueError saying
    how many were found when fewer than `n_animals` animals or `n_names` names remain.
    """
    from phasekv.tasks.templates import Template, compile_template, tokenizer_name  # templates builds on this module

    layouts = {
        "lookup": Template(
            "paper",
            "",
            record=f" {{key}} {{value}}{record_sep}",
            demo=f"{query_sep} {{key}} {{value}}",
            query=f"{query_sep} {{key}}",
            pad=pad,
        ),
        "needle": Template("paper", "", record=f"{record_sep} {{key}} {{value}}", query=f"{query_sep} {{key}}"),
    }
    try:
        lookup, needle = (compile_template(tokenizer, t, probe) for probe, t in layouts.items())
    except ValueError as err:
        raise ValueError(
            f"the paper layout (record separator {record_sep!r}, query separator {query_sep!r}, pad {pad!r}) "
            f"does not fit this tokenizer: {err}"
        ) from None
    separators = {
        "record separator": (record_sep, lookup.record.segments[-1]),
        "query separator": (query_sep, lookup.query.segments[0]),
    }
    for role, (text, ids) in separators.items():
        if len(ids) != 1:
            raise ValueError(
                f"the {role} {text!r} is {len(ids)} tokens in context with tokenizer {tokenizer_name(tokenizer)}; "
                "it must be one token"
            )
    both = {
        kind: [
            (w, i)
            for w, i in zip(getattr(lookup.words, kind + "_words"), getattr(lookup.words, kind + "_ids"), strict=True)
            if i in set(getattr(needle.words, kind + "_ids"))
        ]
        for kind in ("animal", "name")
    }
    vocab = TaskVocab(
        animal_words=tuple(w for w, _ in both["animal"]),
        animal_ids=tuple(i for _, i in both["animal"]),
        name_words=tuple(w for w, _ in both["name"]),
        name_ids=tuple(i for _, i in both["name"]),
        filler_ids=needle.words.filler_ids,
        pad_id=lookup.pad_id,
        record_sep_id=separators["record separator"][1][0],
        query_sep_id=separators["query separator"][1][0],
    )
    vocab.require(n_animals, n_names)
    return vocab
