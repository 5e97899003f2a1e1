"""Typed result formats, readable without torch: what the probes and analyses write, as the report, the
reproduction tables and any user script read it back.

Each class validates a result on load (`Class.load(path)` or `Class.from_dict(data, where)`), naming the file
and the field that is wrong (`ResultFileError`), and keeps every field it does not type. `RESULT_TYPES` maps
the report's kinds to them: "residues" (lookup and needle, `ProbeResult`), "flip", "knockout", "gates",
"gate_trajectory", "cycle", "designs", "theorem1", "theorem2", "sweep".
`gates.snapshot_rows`: gate-metric rows from a training run's gate snapshot.
"""

from .analyses import (
    CycleResult,
    DesignsResult,
    FlipResult,
    GatesResult,
    GateTrajectoryResult,
    KnockoutResult,
    SweepResult,
    Theorem1Result,
    Theorem2Result,
)
from .base import ResultFileError, TypedResult
from .gates import snapshot_rows
from .probe import PROBE_SCHEMA, ProbeResult, learned

RESULT_TYPES: dict[str, type[TypedResult]] = {
    "residues": ProbeResult,
    "flip": FlipResult,
    "knockout": KnockoutResult,
    "gates": GatesResult,
    "gate_trajectory": GateTrajectoryResult,
    "cycle": CycleResult,
    "designs": DesignsResult,
    "theorem1": Theorem1Result,
    "theorem2": Theorem2Result,
    "sweep": SweepResult,
}

__all__ = [
    "PROBE_SCHEMA",
    "RESULT_TYPES",
    "ProbeResult",
    "ResultFileError",
    "TypedResult",
    "learned",
    "snapshot_rows",
]
