"""The flip probe's result format (`phasekv eval flip`): the fields the report reads, checked on load."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field

from phasekv.results.base import Typed, TypedResult


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

    schema_prefix = "phasekv.eval/"
    probes: ClassVar[tuple[str, ...]] = ("flip",)

    @classmethod
    def recognises(cls, data: dict) -> bool:
        return super().recognises(data) and data.get("probe") in cls.probes
