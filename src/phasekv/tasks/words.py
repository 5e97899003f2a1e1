"""Word lists shipped as package data: animals (lookup keys), names (lookup values), filler words
and the filler families of the flip probe.

Animals are lowercase, names are capitalised, and no word appears (case-insensitively) in more
than one of the animal, name and filler lists, so a key can never be mistaken for a value.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

_DATA = "phasekv.data"


@cache
def _read_list(filename: str) -> tuple[str, ...]:
    text = resources.files(_DATA).joinpath(filename).read_text(encoding="utf-8")
    return tuple(line.strip() for line in text.splitlines() if line.strip())


def animals() -> tuple[str, ...]:
    """Animal words (lowercase, single words), in file order."""
    return _read_list("animals.txt")


def names() -> tuple[str, ...]:
    """First names (capitalised, single words), in file order."""
    return _read_list("names.txt")


def filler_words() -> tuple[str, ...]:
    """Common English words used as neutral filler (needle haystack, padding)."""
    return _read_list("filler_words.txt")


@cache
def _families() -> dict[str, dict[str, str]]:
    text = resources.files(_DATA).joinpath("filler_families.json").read_text(encoding="utf-8")
    return json.loads(text)


def filler_families() -> tuple[str, ...]:
    """Names of the flip-probe filler families (at least four)."""
    return tuple(_families())


def filler_text(family: str, n_units: int) -> str:
    """The text of `family` repeated `n_units` times (units joined by the family's joiner)."""
    families = _families()
    if family not in families:
        raise ValueError(f"unknown filler family {family!r}; choose one of {sorted(families)}")
    spec = families[family]
    return spec["joiner"].join([spec["unit"]] * n_units)


def family_words(family: str) -> tuple[str, ...]:
    """The distinct whitespace-separated words of one unit of `family` (for building vocabularies)."""
    return tuple(dict.fromkeys(filler_text(family, 1).split()))
