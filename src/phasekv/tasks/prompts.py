"""Prompt records shared by the generators, and their seeding scheme.

A lookup or needle prompt is identified by (unit, residue, placement): the unit is the content
(a key–name mapping, or a haystack), which is the same at every residue and is the unit of the
bootstrap; the placement indexes the repeated positions of one unit within one residue group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from phasekv.memory import PER_PROMPT_BYTES, check_fits
from phasekv.tasks import placement

SPLITS = ("eval", "calibration")


def split_index(split: str) -> int:
    """Index of `split` in SPLITS; raises ValueError for unknown splits."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {SPLITS}")
    return SPLITS.index(split)


def content_rng(seed: int, split: str, unit: int) -> np.random.Generator:
    """Generator for the content of one unit: depends only on (seed, split, unit).

    Different splits draw from independent streams, so a calibration set is drawn from a pool
    disjoint in seed space from the evaluation set and can be regenerated on its own.
    """
    return np.random.default_rng([seed, split_index(split), unit, 0])


def filler_rng(seed: int, split: str, unit: int) -> np.random.Generator:
    """Generator for the filler words padding one lookup unit, a stream of its own so the unit's content
    (drawn from `content_rng`) is the same whatever the padding text."""
    return np.random.default_rng([seed, split_index(split), unit, 2])


def placement_rng(seed: int, split: str, *keys: int) -> np.random.Generator:
    """Generator for placements (position dealing, gaps) named by `keys`, independent of every
    content stream."""
    return np.random.default_rng([seed, split_index(split), *keys, 1])


@dataclass(frozen=True)
class Prompt:
    """One retrieval prompt.

    `input_ids` start with the caller's prefix ids; `target_position` is t_K, the index of the
    (first) target key token; `query_position` is the last index, where the answer's first token
    is predicted; `answer_ids` are the tokens that must follow.
    """

    input_ids: list[int]
    answer_ids: list[int]
    target_position: int
    query_position: int
    residue: int
    unit: int
    placement: int


@dataclass(frozen=True)
class PromptSet:
    """Prompts of one run with the options that made them and per-residue position statistics."""

    task: str
    options: dict
    prompts: Sequence[Prompt]
    position_stats: list[dict] = field(default_factory=list)

    def by_residue(self) -> dict[int, list[Prompt]]:
        """The prompts grouped by residue, in generation order."""
        groups: dict[int, list[Prompt]] = {}
        for prompt in self.prompts:
            groups.setdefault(prompt.residue, []).append(prompt)
        return groups


class PlacedPrompts(Sequence):
    """Prompts built on access, each of `n_units` units of content placed `per_unit` times at every residue of a
    moment-matched position design; index order is (unit, residue, placement). A generator calls `deal` once,
    then builds a prompt from its `build(unit, residue, placement)`; `dealt[r][unit, placement]` is its t_K."""

    def deal(self, design, origin: int, n_units: int, per_unit: int | None, seed: int, split: str, unit: str) -> None:
        """Deal the positions `origin + design` to the units (`placement.assign`, seeded by (seed, split));
        `per_unit` None: the fewest placements that make the residue groups exact. `unit` names the units in
        the error of a design too large for memory."""
        self.n_units = n_units
        self.per_unit = per_unit or placement.placements_needed(n_units, design.size)
        # built lazily, but each prompt's target position is dealt now (twice over) and its score kept later
        check_fits(
            (16 + PER_PROMPT_BYTES) * n_units * len(design.offsets) * self.per_unit,
            f"{n_units} {unit}s x {design.modulus} residues x {self.per_unit} placements",
            f"lower --{unit}s (or --modulus)",
        )
        self.design, self.unit_name = design, unit
        dealing = placement_rng(seed, split, 0)
        positions = design.by_residue(origin)
        self.residues = sorted(positions)
        self.dealt = {r: placement.assign(positions[r], n_units, self.per_unit, dealing) for r in self.residues}

    def prompt(self, ids, answer, unit: int, residue: int, placement_index: int) -> Prompt:
        """The prompt of ids `ids` (its query last) whose answer is `answer`, at its dealt position."""
        return Prompt(
            input_ids=np.asarray(ids, dtype=np.int64).tolist(),
            answer_ids=np.asarray(answer, dtype=np.int64).tolist(),
            target_position=int(self.dealt[residue][unit, placement_index]),
            query_position=len(ids) - 1,
            residue=residue,
            unit=unit,
            placement=placement_index,
        )

    def design_record(self) -> dict:
        """The position design and its dealing, for a results file."""
        return {
            f"placements_per_{self.unit_name}": self.per_unit,
            "design_size": self.design.size,
            "design_variance": str(self.design.variance),
        }

    def position_stats(self, query_position: int) -> list[dict]:
        """`placement.position_stats` of the dealt positions."""
        return placement.position_stats({r: self.dealt[r].ravel() for r in self.residues}, query_position)

    def __len__(self) -> int:
        return self.n_units * len(self.residues) * self.per_unit

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        unit, rest = divmod(index % len(self), len(self.residues) * self.per_unit)
        r_index, p = divmod(rest, self.per_unit)
        return self.build(unit, self.residues[r_index], p)
