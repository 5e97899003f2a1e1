"""Typed formats of the flip probe, the analyses (knockout, gates, gate trajectories, cycling, the design
comparison) and the theory runs: the fields the report and the reproduction read, checked on load; every
other field is kept as it is. Numbers that can be undefined (a relative change where the clean accuracy is 0)
are `None`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from .base import Typed, TypedResult
from .probe import StrideChoice

Numbers = list[float | None]


class FlipPeriod(Typed):
    value: int


class FlipPattern(Typed):
    pooled: dict[str, Any]


class FlipResult(TypedResult):
    """`phasekv eval flip`: the answer chosen at each filler length, by family, and its period."""

    schema_id: str = Field(alias="schema", pattern=r"^phasekv\.eval/\d+$")
    probe: Literal["flip"]
    candidates: list[Any]
    families: dict[str, Any]
    period: FlipPeriod
    pattern: FlipPattern


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

    mode: str
    modulus: int
    stride: StrideChoice
    clean: CleanAccuracy
    targets: list[KnockoutTarget]


class GateRow(Typed):
    layer: int
    kv_head: int | None
    branch: str
    window: int
    stride: int
    static_offsets: float | None
    per_window_offsets: float | None
    phase_share: Numbers


class GatesResult(TypedResult):
    """`phasekv gates`: one row per layer, KV head and gate branch."""

    rows: list[GateRow]


class GateStep(Typed):
    step: int
    rows: list[GateRow]


class GateTrajectoryResult(TypedResult):
    """`phasekv gates --trajectory` (or a training run's gate snapshots): gate rows per training step."""

    steps: list[GateStep]


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

    stride: int
    deltas: list[int]
    boundary_phase: int
    base: CycleBase
    cycles: list[Cycle]
    grid: CycleGrid


class DesignsResult(TypedResult):
    """The mitigations profile's design comparison (`designs.json`)."""

    designs: list[dict[str, Any]]


class TheoryParams(Typed):
    chunk_size: int
    n_heads: int


class GateTraining(Typed):
    step: list[int]
    key_static: list[Numbers]
    key_per_window: list[Numbers]


class GateTrainingFinal(Typed):
    selected_positions: list[int | None]


class Theorem2Result(TypedResult):
    """`phasekv theory theorem2`: gates trained in the idealised model, their concentration over steps."""

    params: TheoryParams
    trajectory: GateTraining
    final: GateTrainingFinal


class Theorem1Summary(Typed):
    n_starts: int
    best_loss: float


class Theorem1Result(TypedResult):
    """`phasekv theory theorem1`: free query-independent rules from random starts."""

    params: TheoryParams
    summary: Theorem1Summary


class SweepResult(TypedResult):
    """`phasekv theory sweep`: a grid of Theorem 2 runs and its table."""

    grid: dict[str, Any]
    table: list[dict[str, Any]]
