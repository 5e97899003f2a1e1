"""The knockout map's result format (`phasekv knockout`). Numbers that can be undefined (a relative change
where the clean accuracy is 0) are `None`."""

from __future__ import annotations

import math
from typing import Annotated

from phasekv.results.base import Changes, Count, Proportions, Typed, TypedResult, within
from phasekv.studies.probe.result import StrideChoice

RelativeChanges = list[Annotated[float, within(-100.0, math.inf)] | None]  # in %: a knockout can lose all, no more


class KnockoutTarget(Typed):
    layer: Count
    kv_head: Count | None
    relative_change_by_phase: RelativeChanges
    relative_change_by_residue: RelativeChanges
    change_by_phase: Changes
    change_by_residue: Changes


class CleanAccuracy(Typed):
    accuracy_by_phase: Proportions
    accuracy_by_residue: Proportions


class KnockoutResult(TypedResult):
    """`phasekv knockout`: accuracy change by phase and residue when each head or layer is knocked out."""

    schema_prefix = "phasekv.analysis.knockout/"

    mode: str
    modulus: int
    stride: StrideChoice
    clean: CleanAccuracy
    targets: list[KnockoutTarget]
