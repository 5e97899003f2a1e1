"""`phasekv reproduce --profile presses`: the cells of a presses profile (`phasekv.studies.presses`) through the
reproduction's one cache (`cache`), then their table, figure and report."""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..report import build_report
from ..studies.presses.options import DEFAULT_MODEL, PressProfile
from ..studies.presses.run import cell_command, cell_config, cell_path, kvpress_python, run_cell, write_cell_config
from ..studies.presses.table import write_press_table
from ..studies.probe.rejudge import rejudge
from .cache import result_key, scored_under, store_result, stored_result


def cell_key(config: dict, model: Path) -> dict:
    """A cell's cache key (`cache`): its config but the model's path, and the model directory's contents, so a
    stored cell is reused wherever the model folder lives and recomputed once any of its files changes."""
    return result_key("presses", {name: value for name, value in config.items() if name != "model"}, model)


def _cells(profile: PressProfile, out: Path, model: Path, echo=None):
    """Every (probe, method, config, result path, stored result or None, stale) of the profile on `model`. A stored
    cell scored under other statistics counts as stored: with `echo` (a run) it is first judged again from its
    records, stored under the current key and reported; without it (a plan) nothing is written and `stale` says so."""
    if not (model / "config.json").is_file():
        raise FileNotFoundError(
            f"{model} is not an HF model directory: run `phasekv models get smollm2-135m` or pass --model DIR"
        )
    for probe in profile.probes:
        for method in profile.methods:
            config, path = cell_config(profile, method, probe, model), cell_path(out, method, probe)
            key = cell_key(config, model)
            stored, stale = stored_result(path, key), False
            if stored is None and (scored := scored_under(path, key)) is not None:
                if echo is None:
                    stored, stale = scored, True
                else:
                    stored = store_result(path, key, rejudge(scored))
                    echo(f"{probe} {method.name}: judged again from its records (the statistics changed)")
            yield probe, method, config, path, stored, stale


def plan_presses(profile: PressProfile, out: str | Path, model: str | Path = DEFAULT_MODEL) -> str:
    """Write the configs of the cells still to compute and return their command lines (one process per cell:
    each writes that cell's result file), after the cells already stored; computes nothing."""
    out, model = Path(out), Path(model)
    lines = [f"presses profile {profile.name} on {model}: cells under {out}/cells/"]
    for probe, method, config, path, stored, stale in _cells(profile, out, model):
        if stored is not None:
            lines.append(f"# {probe} {method.name}: stored in {path}" + (" (to be judged again)" if stale else ""))
            continue
        python = "$PHASEKV_KVPRESS_PYTHON" if method.needs_kvpress else sys.executable
        command = cell_command(write_cell_config(config, path), path, python)
        lines.append(f"# {probe} {method.name}" + (" (kvpress)" if method.needs_kvpress else ""))
        lines.append(" ".join(command))
    command = " ".join(filter(None, ["phasekv reproduce --profile", profile.name, profile.command_flags(), "--out"]))
    lines.append(
        f"`{command} {out}` computes the cells left ({profile.jobs} at a time), reusing the stored ones, and writes "
        "the table"
    )
    return "\n".join(lines)


def run_presses(
    profile: PressProfile, out: str | Path, model: str | Path = DEFAULT_MODEL, echo=print
) -> dict[str, dict[str, dict]]:
    """Every (method, probe) cell of `profile` on `model` (reusing finished cells), then the table and figure.
    Returns {probe: {method name: result}}."""

    out, model = Path(out), Path(model)
    results: dict[str, dict[str, dict]] = {probe: {} for probe in profile.probes}
    pending = []
    for probe, method, config, path, result, _ in _cells(profile, out, model, echo):
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
