"""The gate cycling result format (`phasekv cycle`)."""

from __future__ import annotations

from phasekv.results.base import Numbers, Typed, TypedResult


class CycleBase(Typed):
    accuracy_by_phase: Numbers
    band: list[Numbers]


class Cycle(Typed):
    delta: int
    accuracy_by_phase: Numbers
    band: list[Numbers]
    observed_change: Numbers
    predicted_change: Numbers
    r2: float | None


class CycleGrid(Typed):
    r2: Numbers


class CycleResult(TypedResult):
    """`phasekv cycle`: accuracy by phase with the gate biases cycled by delta, against the prediction."""

    schema_prefix = "phasekv.analysis.cycle/"

    stride: int
    deltas: list[int]
    boundary_phase: int
    base: CycleBase
    cycles: list[Cycle]
    grid: CycleGrid
