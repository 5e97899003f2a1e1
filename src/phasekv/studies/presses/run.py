"""Running one cell of a presses profile in its own process (`cell`), with the Python that has what its press
needs (`kvpress_python`)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

from phasekv.files import write_atomic

from .options import PressMethod, PressProfile

REPO_ROOT = Path(__file__).resolve().parents[4]


def kvpress_python() -> str:
    """The Python that runs kvpress cells (see the package docstring); raises FileNotFoundError with the fix."""
    chosen = os.environ.get("PHASEKV_KVPRESS_PYTHON")
    if chosen:
        return chosen
    if importlib.util.find_spec("kvpress") is not None:
        return sys.executable
    for root in (Path.cwd(), REPO_ROOT):
        candidate = root / ".venv-kvpress" / "bin" / "python"
        if candidate.is_file():
            return str(candidate)
    raise FileNotFoundError(
        "the presses profile needs kvpress for its kvpress methods: run scripts/kvpress_venv.sh "
        "(creates .venv-kvpress) or set PHASEKV_KVPRESS_PYTHON to a Python with `phasekv[kvpress]`"
    )


def cell_config(profile: PressProfile, method: PressMethod, probe: str, model: Path) -> dict:
    """What a cell's process computes (`cell`): the model, the press and the probe's options."""
    return {
        "model": str(model.resolve()),
        "method": method.name,
        "label": method.label,
        "press": method.spec_text,
        "probe": probe,
        "options": asdict(profile.probes[probe]),
        "grid_shift": profile.grid_shift and method.has_grid,
        "resamples": profile.resamples,
        "batch_size": profile.batch_size,
        "threads": profile.threads,
        "device": profile.device,
    }


def cell_path(out: Path, method: PressMethod, probe: str) -> Path:
    return out / "cells" / f"{method.name}-{probe}.json"


def write_cell_config(config: dict, path: Path) -> Path:
    """Write the config of the cell whose result goes to `path`, beside cells/ (so reports read results only)."""
    config_path = path.parent.parent / "configs" / path.name
    write_atomic(config_path, lambda tmp: Path(tmp).write_text(json.dumps(config, indent=2)))
    return config_path


def cell_command(config_path: Path, path: Path, python: str) -> list[str]:
    """The command line that computes one cell from its config."""
    return [python, "-m", "phasekv.studies.presses.cell", str(config_path), str(path)]


def run_cell(config: dict, path: Path, python: str) -> dict:
    """Run one cell in its own process (`python -m phasekv.studies.presses.cell`); returns its result (without
    its cache key: `phasekv.reproduce.presses.run_presses` stores it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    config_path = write_cell_config(config, path)
    src = str(Path(__file__).resolve().parents[3])  # the same phasekv code in either environment
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    env.setdefault("OMP_NUM_THREADS", "2")
    done = subprocess.run(cell_command(config_path, path, python), env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"cell {path.name} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(path.read_text())
