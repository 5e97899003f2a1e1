"""`phasekv reproduce --profile presses`: phase audits of training-free KV-cache compression on a pretrained HF
model (default: SmolLM2-135M-Instruct as `phasekv models get smollm2-135m` writes it, `DEFAULT_MODEL`).

One *cell* = one method x one probe: a result JSON under out/cells/, reused through the reproduction's one cache
(`cache`: the model directory's contents, the press, the probe's options, the version), so an interrupted or
extended run only computes what is missing. Each
cell runs in its own process (`press_cell`): kvpress needs transformers < 5.3, so cells whose press comes from
kvpress run with the kvpress environment's Python (`kvpress_python`: $PHASEKV_KVPRESS_PYTHON, this Python if it
has kvpress, else .venv-kvpress/bin/python from scripts/kvpress_venv.sh); the full-cache control and phasekv's
pooling run with this Python. The table (table.md, presses.json) and the figure (residues.png) are written
from the cells (`press_table`), and report.html shows every cell in `phasekv report`'s residue section.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from ..files import write_atomic
from ..report import build_report
from ..scoring.press_spec import PRESETS, PressCall, parse_press, press_stride
from ..tasks.lookup import LookupOptions
from ..tasks.needle import NeedleOptions
from .cache import result_key, store_result, stored_result
from .press_table import write_press_table

DEFAULT_MODEL = "models/smollm2-135m"  # where `phasekv models get smollm2-135m` writes by default
REPO_ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class PressMethod:
    """One compression method: `press` is a --press spec (preset name, pool:..., kvpress call) or None (full cache)."""

    name: str
    label: str
    press: str | None = None

    @property
    def needs_kvpress(self) -> bool:
        return self.press is not None and isinstance(parse_press(self.press), PressCall)

    @property
    def spec_text(self) -> str | None:
        return None if self.press is None else PRESETS.get(self.press, self.press)

    @property
    def has_grid(self) -> bool:
        """Whether the method cuts the context on a grid that can move (the grid-shift test applies)."""
        return self.press is not None and press_stride(parse_press(self.spec_text))[0] is not None


@dataclass(frozen=True)
class PressProfile:
    name: str
    description: str
    methods: tuple[PressMethod, ...]
    lookup: LookupOptions | None
    needle: NeedleOptions | None = None
    resamples: int = 1000
    batch_size: int = 8
    threads: int = 1  # torch threads of each cell's process
    jobs: int = 2  # cells run at once (one core each: on a shared 2-core CPU this beats 2 threads per cell)
    grid_shift: bool = True  # methods with a chunk grid also take the grid-shift test (S times the scoring)

    def probes(self) -> dict[str, LookupOptions | NeedleOptions]:
        return {name: o for name, o in (("lookup", self.lookup), ("needle", self.needle)) if o is not None}


METHODS = (
    PressMethod("full", "Full cache (control)"),
    PressMethod("knorm", "KNorm 0.5 (no grid)", "knorm"),
    PressMethod("snapkv", "SnapKV 0.5 (no grid)", "snapkv"),
    PressMethod("streaming", "StreamingLLM 0.5 (no grid)", "streaming"),
    PressMethod("chunkkv8", "ChunkKV(SnapKV 0.5), chunk 8", "chunkkv8"),
    PressMethod("chunkkv4", "ChunkKV(SnapKV 0.5), chunk 4", "chunkkv4"),
    PressMethod("block8", "BlockPress(KNorm 0.5), block 8", "block8-knorm"),
    PressMethod("pool-w8s8", "phasekv pooling W8/S8, local 16", "pool-w8s8"),
    PressMethod("pool-w8s4", "phasekv pooling W8/S4, local 16", "pool-w8s4"),
)

# Modulus 16: a multiple of every grid (4, 8) and above each, so each grid's period check runs at its stride;
# 2 blocks put the target keys over 62 positions, 7.75 periods of 8 for the phase test (it needs 4). The natural
# template pads with filler words: SmolLM2-135M-Instruct answers 87.5% of the full-cache prompts (one block: 86.7%;
# 39.4% padded with " ."). Cost: 453 distinct prompts of 119 tokens per scoring, 3-6 minutes on one core; each
# method with a chunk grid scores them once per grid offset (the grid-shift test: S times), 36 scorings in all.
PRESSES = PressProfile(
    name="presses",
    description="training-free KV-cache compression (kvpress presses, phasekv pooling) on a pretrained HF model",
    methods=METHODS,
    lookup=LookupOptions(
        n_records=8,
        n_demos=4,
        modulus=16,
        n_mappings=8,
        spread_blocks=2,
        protocol="prefix",
        seed=0,
        template="natural",
    ),
)
# The same design with 28x the mappings: 11,243 distinct prompts, a minimum detectable single-phase drop of 8.8
# points at a flat 70% (`phasekv eval lookup ... --mappings 224 --dry-run`), against 37.5 for `presses`. About
# 25 times the scoring of `presses`: a GPU's job (hours per cell on one CPU core).
PRESSES_LARGE = replace(
    PRESSES,
    name="presses-large",
    description=f"{PRESSES.description}, sized to see a 10-point weak phase (224 mappings)",
    lookup=replace(PRESSES.lookup, n_mappings=224),
    batch_size=32,
)
PRESS_PROFILES = {p.name: p for p in (PRESSES, PRESSES_LARGE)}


def kvpress_python() -> str:
    """The Python that runs kvpress cells (see the module docstring); raises FileNotFoundError with the fix."""
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
    """What a cell's process computes (`press_cell`): the model, the press and the probe's options."""
    return {
        "model": str(model.resolve()),
        "method": method.name,
        "label": method.label,
        "press": method.spec_text,
        "probe": probe,
        "options": asdict(profile.probes()[probe]),
        "grid_shift": profile.grid_shift and method.has_grid,
        "resamples": profile.resamples,
        "batch_size": profile.batch_size,
        "threads": profile.threads,
    }


def cell_key(config: dict, model: Path) -> dict:
    """A cell's cache key (`cache`): its config but the model's path, and the model directory's contents, so a
    stored cell is reused wherever the model folder lives and recomputed once any of its files changes."""
    return result_key("presses", {name: value for name, value in config.items() if name != "model"}, model)


def cell_path(out: Path, method: PressMethod, probe: str) -> Path:
    return out / "cells" / f"{method.name}-{probe}.json"


def run_cell(config: dict, path: Path, python: str) -> dict:
    """Run one cell in its own process (`python -m phasekv.reproduce.press_cell`); returns its result (without
    its cache key: `run_presses` stores it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    config_path = path.parent.parent / "configs" / path.name  # beside cells/, so reports read results only
    write_atomic(config_path, lambda tmp: Path(tmp).write_text(json.dumps(config, indent=2)))
    src = str(Path(__file__).resolve().parents[2])  # the same phasekv code in either environment
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}
    env.setdefault("OMP_NUM_THREADS", "2")
    done = subprocess.run(
        [python, "-m", "phasekv.reproduce.press_cell", str(config_path), str(path)],
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"cell {path.name} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(path.read_text())


def run_presses(
    profile: PressProfile, out: str | Path, model: str | Path = DEFAULT_MODEL, echo=print
) -> dict[str, dict[str, dict]]:
    """Every (method, probe) cell of `profile` on `model` (reusing finished cells), then the table and figure.
    Returns {probe: {method name: result}}."""

    out, model = Path(out), Path(model)
    if not (model / "config.json").is_file():
        raise FileNotFoundError(
            f"{model} is not an HF model directory: run `phasekv models get smollm2-135m` or pass --model DIR"
        )
    results: dict[str, dict[str, dict]] = {probe: {} for probe in profile.probes()}
    pending = []
    for probe in profile.probes():
        for method in profile.methods:
            config, path = cell_config(profile, method, probe, model), cell_path(out, method, probe)
            result = stored_result(path, cell_key(config, model))
            if result is None:
                pending.append((probe, method, config, path))
            else:
                echo(f"{probe} {method.name}: reused {path}")
            results[probe][method.name] = result
    kvpress = kvpress_python() if any(method.needs_kvpress for _, method, _, _ in pending) else None  # fail early

    def run(item) -> None:
        probe, method, config, path = item
        started = time.perf_counter()
        result = run_cell(config, path, kvpress if method.needs_kvpress else sys.executable)
        results[probe][method.name] = store_result(path, cell_key(config, model), result)
        echo(f"{probe} {method.name}: {time.perf_counter() - started:.0f} s")

    with ThreadPoolExecutor(profile.jobs) as pool:  # each cell is its own process; threads only wait on them
        list(pool.map(run, pending))
    write_press_table(profile, results, out)
    build_report(out / "cells", out / "report.html")  # the residues section shows every cell by its label
    return results
