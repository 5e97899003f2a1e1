"""The design comparison's result format (`designs.json` of the mitigations profile)."""

from __future__ import annotations

from phasekv.results.base import Points, Typed, TypedResult


class DesignRow(Typed):
    """One design: per seed, its mean and worst accuracy and its gap, in percentage points."""

    design: str
    mean: list[Points | None]
    worst: list[Points | None]
    gap: list[Points | None]


class DesignsResult(TypedResult):
    """The mitigations profile's design comparison (`designs.json`)."""

    schema_prefix = ("phasekv.designs/", "phasekv.analysis.designs/")  # the second: files written before the rename

    designs: list[DesignRow]
