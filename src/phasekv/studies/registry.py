"""The studies the report draws, in page order (the finding first: an audit's, accuracy by residue, then the
analyses): for each, its result formats, its figure module and the models it can be run on (a missing study is
noted only where the results hold such a model).

Adding a study: a folder `phasekv/studies/<name>/` with `result.py` (a `TypedResult` per result kind),
`figure.py` (`section(inputs) -> block | None`, `section_html(block) -> str`, `png(block, inputs, out_dir)`) and
the code that makes the results, then one `Study(...)` line here. Result and figure modules import no
torch (`import-linter` checks it), so reading results and drawing them stays light.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from phasekv.results import TypedResult
from phasekv.studies.audit import figure as audit_figure
from phasekv.studies.audit.result import AuditResult
from phasekv.studies.conformance import figure as conformance_figure
from phasekv.studies.conformance.result import ConformanceResult
from phasekv.studies.cycle import figure as cycle_figure
from phasekv.studies.cycle.result import CycleResult
from phasekv.studies.designs import figure as designs_figure
from phasekv.studies.designs.result import DesignsResult
from phasekv.studies.flip import figure as flip_figure
from phasekv.studies.flip.result import FlipResult
from phasekv.studies.gates import figure as gates_figure
from phasekv.studies.gates.result import GatesResult, GateTrajectoryResult
from phasekv.studies.knockout import figure as knockout_figure
from phasekv.studies.knockout.result import KnockoutResult
from phasekv.studies.probe import figure as probe_figure
from phasekv.studies.probe.registry import names as probe_names
from phasekv.studies.probe.result import ProbeResult
from phasekv.studies.theory import figure as theory_figure
from phasekv.studies.theory.result import SweepResult, Theorem1Result, Theorem2Result


def any_model(model: dict) -> bool:
    return True


def local_model(model: dict) -> bool:
    """A model whose weights are here (not a served endpoint): what runs inside the model need."""
    return model.get("kind") != "endpoint"


def own_compressor(model: dict) -> bool:
    """A model that compresses its KV cache with a compressor of its own (gates to read, cycle, explain by the
    theory), not a full-attention model nor one compressed by a training-free press."""
    return model.get("compression_stride") is not None and not model.get("press")


@dataclass(frozen=True)
class Study:
    key: str  # the report section's key
    title: str
    figure: ModuleType
    results: dict[str, type[TypedResult]]  # the result kinds the section reads
    missing: str | None  # what is missing when the section is left out (None: not noted)
    command: str  # the command that makes its results
    applies: Callable[[dict], bool] = any_model  # a model (its result's model record) the study can be run on


STUDIES = (
    Study("audit", "Audit", audit_figure, {"audit": AuditResult}, None, "phasekv audit MODEL"),
    Study(
        "residues",
        "Accuracy by residue",
        probe_figure,
        {"residues": ProbeResult},
        f"no {' or '.join(probe_names())} results",
        f"phasekv eval {'|'.join(probe_names())} ... --out DIR/x.json",
    ),
    Study("flip", "Flip probe", flip_figure, {"flip": FlipResult}, "no flip results", "phasekv eval flip ... --out"),
    Study(
        "knockout",
        "Knockout map",
        knockout_figure,
        {"knockout": KnockoutResult},
        "no knockout results",
        "phasekv knockout ... --out DIR",
        local_model,
    ),
    Study(
        "gates",
        "Gate plane",
        gates_figure,
        {"gates": GatesResult, "gate_trajectory": GateTrajectoryResult},
        "no gate results or training gate snapshots",
        "phasekv gates ... --out DIR",
        own_compressor,
    ),
    Study(
        "cycle",
        "Gate cycling",
        cycle_figure,
        {"cycle": CycleResult},
        "no gate cycling results",
        "phasekv cycle ... --out DIR",
        own_compressor,
    ),
    Study(
        "theory",
        "Theory",
        theory_figure,
        {"theorem1": Theorem1Result, "theorem2": Theorem2Result, "sweep": SweepResult},
        "no theory results",
        "phasekv theory theorem2|sweep --out",
        own_compressor,
    ),
    Study(
        "designs",
        "Designs against the weak spots",
        designs_figure,
        {"designs": DesignsResult},
        None,
        "phasekv reproduce --profile mitigations",
    ),
    Study(
        "conformance",
        "Phase conformance",
        conformance_figure,
        {"conformance": ConformanceResult},
        None,
        "phasekv conformance MODEL --out DIR",
    ),
)

RESULT_TYPES: dict[str, type[TypedResult]] = {kind: cls for study in STUDIES for kind, cls in study.results.items()}


def classify(data: object) -> str | None:
    """The result kind of a parsed JSON file, or None when it is not a result any study draws."""
    if not isinstance(data, dict):
        return None
    return next((kind for kind, cls in RESULT_TYPES.items() if cls.recognises(data)), None)
