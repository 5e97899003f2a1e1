"""`phasekv reproduce --profile presses`: the cells of a presses profile (`phasekv.studies.presses`) through the
reproduction's one cache (`cache`), then their table, figure and report."""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..report import build_report
from ..studies.presses.options import DEFAULT_MODEL, PressProfile
from ..studies.presses.run import cell_config, cell_path, kvpress_python, run_cell
from ..studies.presses.table import write_press_table
from .cache import result_key, store_result, stored_result


def cell_key(config: dict, model: Path) -> dict:
    """A cell's cache key (`cache`): its config but the model's path, and the model directory's contents, so a
    stored cell is reused wherever the model folder lives and recomputed once any of its files changes."""
    return result_key("presses", {name: value for name, value in config.items() if name != "model"}, model)


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
