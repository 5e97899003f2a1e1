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
from collections import Counter
from pathlib import Path

from phasekv.results import ResultFileError, TypedResult
from phasekv.studies import registry
from phasekv.studies.gates.snapshots import snapshot_rows

from ..charts.inputs import Inputs, Result
from ..charts.labels import model_name

SKIP_DIRS = {"checkpoints", "tokenizer", "configs", ".git", "__pycache__"}
SNAPSHOT = re.compile(r"^step_(\d+)\.json$")
MAX_BYTES = 200 * 2**20


class ReportInputError(ResultFileError):
    """A result file the report cannot use; the message names the file."""


def validate(kind: str, data: dict, where: str) -> TypedResult:
    """`data` as its kind's typed result; raises ReportInputError naming `where` and the bad field."""
    try:
        return registry.RESULT_TYPES[kind].from_dict(data, where)
    except ResultFileError as err:
        raise ReportInputError(str(err)) from None


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


def _result_name(data: dict, rel: Path) -> str:
    """The model a result is about as a reader names it (see `model_name`); its file when it names none."""
    return model_name(data, rel.with_suffix("").as_posix())


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
            "schema": "phasekv.gate_trajectory/1",
            "run_dir": str(run_dir),
            "source": "snapshots",
            "steps": steps,
        }
        typed = validate("gate_trajectory", data, f"gate snapshots under {run_dir}")
        found.append(Result("gate_trajectory", _rel(run_dir, root), data, run_dir.name, typed))
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
        kind = registry.classify(data)
        if kind is None:
            inputs.ignored.append(str(rel))
            continue
        typed = validate(kind, data, where)
        inputs.results.setdefault(kind, []).append(Result(kind, rel, data, _result_name(data, rel), typed))
    for found in inputs.results.values():  # two results naming one model (a served model's lookup and needle)
        names = Counter(r.name for r in found)
        for r in found:
            if names[r.name] > 1:
                r.name = f"{r.name} ({r.path.with_suffix('').as_posix()})"
    covered = {str(Path(r.data.get("run_dir", "")).resolve()) for r in inputs.of("gate_trajectory")}
    for traj in snapshot_trajectories(root):
        if str(Path(traj.data["run_dir"]).resolve()) not in covered:
            inputs.results.setdefault("gate_trajectory", []).append(traj)
    return inputs
