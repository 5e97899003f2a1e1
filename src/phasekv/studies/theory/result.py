"""The theory runs' result formats (`phasekv theory theorem1|theorem2|sweep`)."""

from __future__ import annotations

from typing import Any

from phasekv.results.base import Count, Numbers, Typed, TypedResult


class TheoryParams(Typed):
    chunk_size: Count
    n_heads: Count


class GateTraining(Typed):
    step: list[int]
    key_static: list[Numbers]
    key_per_window: list[Numbers]


class GateTrainingFinal(Typed):
    selected_positions: list[int | None]


class Theorem2Result(TypedResult):
    """`phasekv theory theorem2`: gates trained in the idealised model, their concentration over steps."""

    recognising_keys = frozenset({"params", "trajectory", "final"})

    params: TheoryParams
    trajectory: GateTraining
    final: GateTrainingFinal


class Theorem1Summary(Typed):
    n_starts: Count
    best_loss: float


class Theorem1Result(TypedResult):
    """`phasekv theory theorem1`: free query-independent rules from random starts."""

    recognising_keys = frozenset({"params", "starts", "summary"})

    params: TheoryParams
    summary: Theorem1Summary


class SweepResult(TypedResult):
    """`phasekv theory sweep`: a grid of Theorem 2 runs and its table."""

    recognising_keys = frozenset({"base", "grid", "seeds", "runs", "table"})

    grid: dict[str, Any]
    table: list[dict[str, Any]]
