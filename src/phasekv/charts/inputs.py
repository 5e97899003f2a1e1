"""The results a report is drawn from, by kind, as `load.load_results` finds them (what every study's
`figure.section` reads)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from phasekv.results import TypedResult


@dataclass
class Result:
    """One result file: its kind, path (relative to the results directory when inside it) and content."""

    kind: str
    path: Path
    data: dict
    name: str = ""
    typed: TypedResult | None = None  # `data` validated as its kind's `phasekv.studies.registry.RESULT_TYPES` class


@dataclass
class Inputs:
    """Every usable result under a results directory, by kind, plus what was ignored."""

    root: Path
    results: dict[str, list[Result]] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)

    def of(self, kind: str) -> list[Result]:
        return self.results.get(kind, [])
