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

from phasekv.tasks import words

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
    the query; `filler_ids` fill the needle haystack.
    """

    animal_words: tuple[str, ...]
    animal_ids: tuple[int, ...]
    name_words: tuple[str, ...]
    name_ids: tuple[int, ...]
    filler_ids: tuple[int, ...]
    pad_id: int
    record_sep_id: int
    query_sep_id: int

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


def _words_as_tokens(tokenizer, candidates: Sequence[str], space: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
    ids = single_token_ids(tokenizer, [space + w for w in candidates])
    kept = [(w, ids[space + w]) for w in candidates if space + w in ids]
    unique: dict[int, str] = {}
    for word, tok_id in kept:
        unique.setdefault(tok_id, word)
    return tuple(unique.values()), tuple(unique)


def _one_token(tokenizer, piece: str, role: str) -> int:
    ids = single_token_ids(tokenizer, [piece])
    if piece not in ids:
        raise ValueError(f"the {role} {piece!r} is not a single token in context for this tokenizer")
    return ids[piece]


def task_vocab(
    tokenizer,
    *,
    n_animals: int = 0,
    n_names: int = 0,
    space: str = " ",
    record_sep: str = ",",
    query_sep: str = ";",
    pad: str = " .",
) -> TaskVocab:
    """Find the single-token animals, names and filler words of `tokenizer`.

    Words are tested with `space` in front (" cat"), as they appear in prompts. Raises ValueError
    saying how many were found when fewer than `n_animals` animals or `n_names` names remain.
    """
    animal_words, animal_ids = _words_as_tokens(tokenizer, words.animals(), space)
    name_words, name_ids = _words_as_tokens(tokenizer, words.names(), space)
    _, filler_ids = _words_as_tokens(tokenizer, words.filler_words(), space)
    vocab = TaskVocab(
        animal_words=animal_words,
        animal_ids=animal_ids,
        name_words=name_words,
        name_ids=name_ids,
        filler_ids=filler_ids,
        pad_id=_one_token(tokenizer, pad, "padding token"),
        record_sep_id=_one_token(tokenizer, record_sep, "record separator"),
        query_sep_id=_one_token(tokenizer, query_sep, "query separator"),
    )
    vocab.require(n_animals, n_names)
    return vocab
