"""Find, read and check the result files a report is drawn from.

Every ``*.json`` under the results directory is read (directories holding checkpoints, tokenizers
and training configs are skipped). A file is classified by its ``schema`` (and ``probe``) or, for the
theory results, by its keys; files of other kinds are ignored and listed. A file that is not valid
JSON, or a recognised result that lacks a key a figure needs, raises :class:`ReportInputError` naming
the file and the key.

Training runs with gate snapshots (``<run>/gates/step_*.json``, written during training) become gate
trajectories when no ``phasekv gates --trajectory`` result covers them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..results import ProbeResult, ResultFileError, snapshot_rows

SKIP_DIRS = {"checkpoints", "tokenizer", "configs", ".git", "__pycache__"}
SNAPSHOT = re.compile(r"^step_(\d+)\.json$")
MAX_BYTES = 200 * 2**20

# kind -> keys a result of that kind must have (dotted paths reach into nested dicts)
# (lookup and needle results, kind "residues", are checked by their typed format, `phasekv.results.ProbeResult`)
REQUIRED = {
    "flip": ["candidates", "families", "period.value", "pattern.pooled"],
    "knockout": ["mode", "modulus", "stride.value", "clean.accuracy_by_phase", "clean.accuracy_by_residue", "targets"],
    "gates": ["rows"],
    "gate_trajectory": ["steps"],
    "cycle": ["stride", "deltas", "boundary_phase", "base.accuracy_by_phase", "base.band", "cycles", "grid.r2"],
    "theorem2": [
        "params.chunk_size",
        "params.n_heads",
        "trajectory.step",
        "trajectory.key_static",
        "trajectory.key_per_window",
        "final.selected_positions",
    ],
    "theorem1": ["params.chunk_size", "params.n_heads", "summary.n_starts", "summary.best_loss"],
    "sweep": ["grid", "table"],
    "designs": ["designs"],
}
ROW_KEYS = {
    "knockout": (
        "targets",
        [
            "layer",
            "kv_head",
            "relative_change_by_phase",
            "relative_change_by_residue",
            "change_by_phase",
            "change_by_residue",
        ],
    ),
    "gates": (
        "rows",
        ["layer", "kv_head", "branch", "window", "stride", "static_offsets", "per_window_offsets", "phase_share"],
    ),
    "cycle": ("cycles", ["delta", "accuracy_by_phase", "band", "observed_change", "predicted_change", "r2"]),
}


class ReportInputError(ResultFileError):
    """A result file the report cannot use; the message names the file."""


@dataclass
class Result:
    """One result file: its kind, path (relative to the results directory when inside it) and content."""

    kind: str
    path: Path
    data: dict
    name: str = ""
    probe: ProbeResult | None = None  # the typed result, for kind "residues"


@dataclass
class Inputs:
    """Every usable result under a results directory, by kind, plus what was ignored."""

    root: Path
    results: dict[str, list[Result]] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)

    def of(self, kind: str) -> list[Result]:
        return self.results.get(kind, [])


def classify(data: object) -> str | None:
    """The kind of a parsed result file, or None when it is not a result the report draws."""
    if not isinstance(data, dict):
        return None
    schema = data.get("schema")
    if schema == "phasekv.eval/1":
        probe = data.get("probe")
        if probe in ("lookup", "needle"):
            return "residues"
        if probe == "flip":
            return "flip"
        return None
    if isinstance(schema, str) and schema.startswith("phasekv.analysis."):
        kind = schema.removeprefix("phasekv.analysis.").split("/")[0]
        return kind if kind in REQUIRED else None
    if {"params", "trajectory", "final"} <= data.keys():
        return "theorem2"
    if {"params", "starts", "summary"} <= data.keys():
        return "theorem1"
    if {"base", "grid", "seeds", "runs", "table"} <= data.keys():
        return "sweep"
    return None


def _get(data: dict, dotted: str):
    node = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(dotted)
        node = node[part]
    return node


def validate(kind: str, data: dict, where: str) -> ProbeResult | None:
    """Raise ReportInputError naming `where` when `data` lacks a key the `kind` figures need; returns the
    typed result of a residue probe."""
    if kind == "residues":
        try:
            return ProbeResult.from_dict(data, where)
        except ResultFileError as err:
            raise ReportInputError(str(err)) from None
    for key in REQUIRED[kind]:
        try:
            _get(data, key)
        except KeyError:
            raise ReportInputError(f"{where}: a {kind} result needs the key {key!r}, which is missing") from None
    if kind in ROW_KEYS:
        list_key, keys = ROW_KEYS[kind]
        rows = data[list_key]
        if not isinstance(rows, list):
            raise ReportInputError(f"{where}: {list_key!r} must be a list")
        for i, row in enumerate(rows):
            missing = [k for k in keys if not isinstance(row, dict) or k not in row]
            if missing:
                raise ReportInputError(f"{where}: {list_key}[{i}] lacks {', '.join(repr(k) for k in missing)}")
    if kind == "gate_trajectory":
        for i, step in enumerate(data["steps"]):
            if not isinstance(step, dict) or "step" not in step or "rows" not in step:
                raise ReportInputError(f"{where}: steps[{i}] needs 'step' and 'rows'")
    return None


def read_json(path: Path, where: str) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ReportInputError(
            f"{where}: not valid JSON ({err.msg} at line {err.lineno}, column {err.colno})"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ReportInputError(f"{where}: cannot be read ({err})") from None


def _walk(root: Path):
    if root.is_file():
        yield root
        return
    for path in sorted(root.iterdir()):
        if path.is_dir():
            if path.name in SKIP_DIRS or path.name.startswith("."):
                continue
            if path.name == "gates" and any(SNAPSHOT.match(p.name) for p in path.glob("step_*.json")):
                continue  # training gate snapshots: read as trajectories, not as result files
            yield from _walk(path)
        elif path.suffix == ".json" and path.name not in {"config.json", "run.json"}:
            yield path


def _rel(path: Path, root: Path) -> Path:
    try:
        return path.relative_to(root if root.is_dir() else root.parent)
    except ValueError:
        return path


def _result_name(kind: str, data: dict, rel: Path) -> str:
    for key in ("label", "run"):
        if isinstance(data.get(key), str) and data[key]:
            return data[key]
    return rel.with_suffix("").as_posix()


def snapshot_trajectories(root: Path) -> list[Result]:
    """Gate trajectories from training runs' gate snapshots (`<run>/gates/step_*.json`) under `root`."""
    found = []
    if not root.is_dir():
        return found
    for gates_dir in sorted(root.rglob("gates")):
        if not gates_dir.is_dir() or any(part in SKIP_DIRS for part in gates_dir.relative_to(root).parts):
            continue
        files = sorted((int(m.group(1)), p) for p in gates_dir.glob("step_*.json") if (m := SNAPSHOT.match(p.name)))
        if not files:
            continue
        steps = []
        for step, path in files:
            where = str(_rel(path, root))
            snap = read_json(path, where)
            try:
                steps.append({"step": step, "rows": snapshot_rows(snap)})
            except (KeyError, TypeError, IndexError) as err:
                raise ReportInputError(f"{where}: not a gate snapshot (missing {err})") from None
        run_dir = gates_dir.parent
        data = {
            "schema": "phasekv.analysis.gate_trajectory/1",
            "run_dir": str(run_dir),
            "source": "snapshots",
            "steps": steps,
        }
        found.append(Result("gate_trajectory", _rel(run_dir, root), data, run_dir.name))
    return found


def load_results(root: str | Path) -> Inputs:
    """Read every result under `root` (a directory or one file); see the module docstring."""
    root = Path(root)
    if not root.exists():
        raise ReportInputError(f"{root}: no such file or directory")
    inputs = Inputs(root=root)
    for path in _walk(root):
        rel = _rel(path, root)
        where = str(path)
        if path.stat().st_size > MAX_BYTES:
            inputs.ignored.append(f"{rel} (larger than {MAX_BYTES // 2**20} MiB)")
            continue
        data = read_json(path, where)
        kind = classify(data)
        if kind is None:
            inputs.ignored.append(str(rel))
            continue
        probe = validate(kind, data, where)
        inputs.results.setdefault(kind, []).append(Result(kind, rel, data, _result_name(kind, data, rel), probe))
    covered = {str(Path(r.data.get("run_dir", "")).resolve()) for r in inputs.of("gate_trajectory")}
    for traj in snapshot_trajectories(root):
        if str(Path(traj.data["run_dir"]).resolve()) not in covered:
            inputs.results.setdefault("gate_trajectory", []).append(traj)
    return inputs
