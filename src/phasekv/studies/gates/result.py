"""The gate studies' result formats: `phasekv gates` (one row per layer, KV head and gate branch) and gate
trajectories over training (`phasekv gates --trajectory`, or a training run's gate snapshots)."""

from __future__ import annotations

from pydantic import model_validator

from phasekv.results.base import Count, FieldProblems, Numbers, Typed, TypedResult, range_problems


class GateRow(Typed):
    layer: Count
    kv_head: Count | None
    branch: str
    window: Count
    stride: Count
    static_offsets: float | None
    per_window_offsets: float | None
    phase_share: Numbers  # the gate's mean weight per phase times S: 1 is a uniform share, S all of it

    @model_validator(mode="after")
    def _check(self) -> GateRow:
        problems = list(range_problems("phase_share", self.phase_share, 0.0, float(self.stride)))
        if problems:
            raise FieldProblems(problems)
        return self


class GatesResult(TypedResult):
    """`phasekv gates`: one row per layer, KV head and gate branch."""

    schema_prefix = ("phasekv.gates/", "phasekv.analysis.gates/")  # the second: files written before the rename

    rows: list[GateRow]


class GateStep(Typed):
    step: int
    rows: list[GateRow]


class GateTrajectoryResult(TypedResult):
    """`phasekv gates --trajectory` (or a training run's gate snapshots): gate rows per training step."""

    # the second: files written before the rename
    schema_prefix = ("phasekv.gate_trajectory/", "phasekv.analysis.gate_trajectory/")

    steps: list[GateStep]
