"""Record and query templates of the synthetic mixture, and the token ids they draw from.

A template is a pair of token patterns: `record` (written once per record) and `query` (written
once per query, ending with the answer). "K" stands for the key tokens, "V" for the value tokens,
anything else is a literal token. `lookup` is exactly the evaluation probe's format (records
`a n ,`, queries `; a n`); `pairs` asks the same animal→name question in another format; `multi`
uses multi-token keys (animals and filler words) and multi-token values (names and digits).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from phasekv.tasks.heldout import HeldOutPairs
from phasekv.tasks.vocab import TaskVocab, single_token_ids, task_vocab

KEY = "K"
VALUE = "V"
KEY_POOLS = ("animals", "mixed")
VALUE_POOLS = ("names", "mixed")


@dataclass(frozen=True)
class Template:
    """`record`/`query` patterns; keys from `keys` ("animals" or "mixed": animals + filler words),
    values from `values` ("names" or "mixed": names + digits), lengths uniform in the inclusive ranges."""

    record: tuple[str, ...]
    query: tuple[str, ...]
    keys: str = "animals"
    values: str = "names"
    key_len: tuple[int, int] = (1, 1)
    value_len: tuple[int, int] = (1, 1)

    def __post_init__(self) -> None:
        for pattern in (self.record, self.query):
            if pattern.count(KEY) != 1 or pattern.count(VALUE) != 1 or pattern.index(KEY) > pattern.index(VALUE):
                raise ValueError(f"pattern {pattern} must hold one {KEY} before one {VALUE}")
        if self.query[-1] != VALUE:
            raise ValueError(f"query pattern {self.query} must end with the answer {VALUE}")
        if self.keys not in KEY_POOLS or self.values not in VALUE_POOLS:
            raise ValueError(f"keys must be one of {KEY_POOLS} and values one of {VALUE_POOLS}")
        for lo, hi in (self.key_len, self.value_len):
            if not 1 <= lo <= hi:
                raise ValueError(f"length range ({lo}, {hi}) must satisfy 1 <= lo <= hi")

    @property
    def single_animal_name(self) -> bool:
        """One animal token mapped to one name token: the pairs the held-out partition governs."""
        return (self.keys, self.values, self.key_len, self.value_len) == ("animals", "names", (1, 1), (1, 1))

    @property
    def literals(self) -> tuple[str, ...]:
        return tuple(s for s in self.record + self.query if s not in (KEY, VALUE))


TEMPLATES: dict[str, Template] = {
    "lookup": Template(record=(KEY, VALUE, ","), query=(";", KEY, VALUE)),
    "pairs": Template(record=("(", KEY, ":", VALUE, ")"), query=("?", KEY, ":", VALUE)),
    "multi": Template(
        record=("[", KEY, "=", VALUE, "]"),
        query=("?", KEY, "=", VALUE),
        keys="mixed",
        values="mixed",
        key_len=(1, 3),
        value_len=(1, 3),
    ),
}


@dataclass(frozen=True)
class MixtureVocab:
    """Token ids of one tokenizer for the mixture: the task vocabulary, digits, template literals,
    and the held-out matrix [animals, names] of `task`'s word order."""

    task: TaskVocab
    digit_ids: tuple[int, ...]
    literal_ids: dict[str, int]
    vocab_size: int
    held: np.ndarray

    def pool(self, kind: str) -> np.ndarray:
        """Token ids of a key or value pool."""
        pools = {
            "animals": self.task.animal_ids,
            "names": self.task.name_ids,
            "mixed_keys": self.task.animal_ids + self.task.filler_ids,
            "mixed_values": self.task.name_ids + self.digit_ids,
        }
        return np.asarray(pools[kind], dtype=np.int64)


def mixture_vocab(tokenizer, held_out: HeldOutPairs, templates: dict[str, Template] = TEMPLATES) -> MixtureVocab:
    """The ids of everything the `templates` write, for a fast HF tokenizer; raises ValueError when a
    literal is not a single token."""
    task = task_vocab(tokenizer, n_animals=2, n_names=2)
    literals = sorted({lit for t in templates.values() for lit in t.literals})
    found = single_token_ids(tokenizer, [" " + lit for lit in literals])
    missing = [lit for lit in literals if " " + lit not in found]
    if missing:
        raise ValueError(f"template literals {missing} are not single tokens for this tokenizer")
    digits = single_token_ids(tokenizer, [f" {d}" for d in range(10)])
    return MixtureVocab(
        task=task,
        digit_ids=tuple(digits.values()),
        literal_ids={lit: found[" " + lit] for lit in literals},
        vocab_size=len(tokenizer),
        held=held_out.matrix(task.animal_words, task.name_words),
    )
