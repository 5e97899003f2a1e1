"""Prompt records shared by the generators, and their seeding scheme.

A lookup or needle prompt is identified by (unit, residue, placement): the unit is the content
(a key–name mapping, or a haystack), which is the same at every residue and is the unit of the
bootstrap; the placement indexes the repeated positions of one unit within one residue group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

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
