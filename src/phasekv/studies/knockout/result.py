"""The knockout map's result format (`phasekv knockout`). Numbers that can be undefined (a relative change
where the clean accuracy is 0) are `None`."""

from __future__ import annotations

from phasekv.results.base import Numbers, Typed, TypedResult
from phasekv.studies.probe.result import StrideChoice


class KnockoutTarget(Typed):
    layer: int
    kv_head: int | None
    relative_change_by_phase: Numbers
    relative_change_by_residue: Numbers
    change_by_phase: Numbers
    change_by_residue: Numbers


class CleanAccuracy(Typed):
    accuracy_by_phase: Numbers
    accuracy_by_residue: Numbers


class KnockoutResult(TypedResult):
    """`phasekv knockout`: accuracy change by phase and residue when each head or layer is knocked out."""

    schema_prefix = "phasekv.analysis.knockout/"

    mode: str
    modulus: int
    stride: StrideChoice
    clean: CleanAccuracy
    targets: list[KnockoutTarget]
