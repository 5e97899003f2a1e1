"""A fixed, seed-derived partition of animal→name pairs into training pairs and held-out pairs.

Each animal and each name gets a rank from a seeded permutation of the shipped word lists; the
pair (animal, name) is held out iff (rank(animal) + rank(name)) mod `modulus` == 0, so a fraction
1/modulus of all pairs is held out and every animal keeps most names for training. The synthetic
mixture never writes a held-out pair as a single-token animal→name record, so evaluation mappings
built from held-out pairs (`assign_names(..., held_out=True)`) never appeared in training. The
partition depends on words, not token ids, so it is the same for every tokenizer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from phasekv.tasks import words


@dataclass(frozen=True)
class HeldOutPairs:
    """The partition with `seed` and `modulus` (1/modulus of the pairs are held out)."""

    seed: int = 0
    modulus: int = 4

    def __post_init__(self) -> None:
        if self.modulus < 2:
            raise ValueError(f"held-out modulus must be >= 2 (1/modulus of pairs held out), got {self.modulus}")

    @cached_property
    def _ranks(self) -> tuple[dict[str, int], dict[str, int]]:
        rng = np.random.default_rng([self.seed, 7])
        animals, names = words.animals(), words.names()
        a = rng.permutation(len(animals))
        n = rng.permutation(len(names))
        return dict(zip(animals, a.tolist(), strict=True)), dict(zip(names, n.tolist(), strict=True))

    def _rank(self, table: dict[str, int], word: str, kind: str) -> int:
        if word not in table:
            raise KeyError(f"{word!r} is not in phasekv's {kind} list; the partition covers only those words")
        return table[word]

    def contains(self, animal: str, name: str) -> bool:
        """True if (animal, name) is held out of training."""
        animals, names = self._ranks
        return (self._rank(animals, animal, "animal") + self._rank(names, name, "name")) % self.modulus == 0

    def matrix(self, animal_words: Sequence[str], name_words: Sequence[str]) -> np.ndarray:
        """[len(animal_words), len(name_words)] bool: True where the pair is held out."""
        animals, names = self._ranks
        ra = np.array([self._rank(animals, w, "animal") for w in animal_words])
        rn = np.array([self._rank(names, w, "name") for w in name_words])
        return (ra[:, None] + rn[None, :]) % self.modulus == 0


def assign_names(rng: np.random.Generator, held: np.ndarray, animal_rows: np.ndarray, held_out: bool) -> np.ndarray:
    """Distinct name columns for `animal_rows`, each pair held out (`held_out=True`) or not.

    `held` is `HeldOutPairs.matrix(...)` [A, N]; returns an int array like `animal_rows`. Names are
    drawn uniformly among the allowed, still unused ones. Raises ValueError if none is left.
    """
    unused = np.ones(held.shape[1], dtype=bool)
    out = np.empty(len(animal_rows), dtype=np.int64)
    for i, row in enumerate(animal_rows):
        allowed = np.flatnonzero(unused & (held[row] == held_out))
        if allowed.size == 0:
            kind = "held-out" if held_out else "training"
            raise ValueError(f"no unused {kind} name left for animal row {row} after {i} records")
        out[i] = allowed[rng.integers(allowed.size)]
        unused[out[i]] = False
    return out
