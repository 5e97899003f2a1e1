"""The design comparison's result format (`designs.json` of the mitigations profile)."""

from __future__ import annotations

from typing import Any

from phasekv.results.base import TypedResult


class DesignsResult(TypedResult):
    """The mitigations profile's design comparison (`designs.json`)."""

    schema_prefix = "phasekv.analysis.designs/"

    designs: list[dict[str, Any]]
