"""The gate cycling result format (`phasekv cycle`)."""

from __future__ import annotations

import math
from typing import Annotated

from phasekv.results.base import Changes, Proportions, Typed, TypedResult, within

R2 = Annotated[float, within(-math.inf, 1.0)]  # a fit can be worse than the mean (below 0), never above 1


class CycleBase(Typed):
    accuracy_by_phase: Proportions
    band: list[Proportions]


class Cycle(Typed):
    delta: int
    accuracy_by_phase: Proportions
    band: list[Proportions]
    observed_change: Changes
    predicted_change: Changes
    r2: R2 | None


class CycleGrid(Typed):
    r2: list[R2 | None]


class CycleResult(TypedResult):
    """`phasekv cycle`: accuracy by phase with the gate biases cycled by delta, against the prediction."""

    schema_prefix = ("phasekv.cycle/", "phasekv.analysis.cycle/")  # the second: files written before the rename

    stride: int
    deltas: list[int]
    boundary_phase: int
    base: CycleBase
    cycles: list[Cycle]
    grid: CycleGrid
