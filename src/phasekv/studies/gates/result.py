"""The gate studies' result formats: `phasekv gates` (one row per layer, KV head and gate branch) and gate
trajectories over training (`phasekv gates --trajectory`, or a training run's gate snapshots)."""

from __future__ import annotations

from phasekv.results.base import Numbers, Typed, TypedResult


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

    schema_prefix = "phasekv.analysis.gates/"

    rows: list[GateRow]


class GateStep(Typed):
    step: int
    rows: list[GateRow]


class GateTrajectoryResult(TypedResult):
    """`phasekv gates --trajectory` (or a training run's gate snapshots): gate rows per training step."""

    schema_prefix = "phasekv.analysis.gate_trajectory/"

    steps: list[GateStep]
