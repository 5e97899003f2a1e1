"""`phasekv reproduce`: pretrain models that differ only in their attention, probe them by phase,
and write the paper-style table and figure."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import asdict
from pathlib import Path

from tqdm import tqdm

from ..files import write_text_atomic
from ..model.io import read_config
from ..report import build_report
from ..studies.cycle.cycling import cycling_problem
from ..studies.designs import run as designs
from ..studies.gates.illustration import illustration
from ..studies.knockout.figure import plot_knockout
from . import across_seeds
from .profiles import PROFILES, Profile, RunSpec, get_profile
from .report import markdown_table, table_rows
from .results_doc import figure_name, results_document
from .runner import evaluate_all, final_checkpoint, logged_training_seconds, run_dir, train_all, write_json
from .stages import run_stage, run_stages


def reproduce(profile: Profile | str, out: str | Path, jobs: int | None = None, progress: bool = True) -> dict:
    """Train (or reuse) every run of `profile` in `out`, evaluate them, write summary.json, report.html (with
    report_figures/residues.png) and the results document `<profile>.md` (`results_doc`); returns the summary."""
    profile = get_profile(profile) if isinstance(profile, str) else profile
    jobs = jobs or profile.jobs
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    train_seconds = train_all(profile, out, jobs, progress)
    trained = time.perf_counter()
    results = evaluate_all(profile, out, progress, threads=jobs)  # as many cores as training used
    evaluated = time.perf_counter()
    if progress:
        tqdm.write(f"stage train: {trained - started:.0f} s wall\nstage evaluate: {evaluated - trained:.0f} s wall")
    stages = run_stages(profile, out, progress) if profile.analyses else {}
    rows = table_rows(results, out / "results")
    table = markdown_table(rows)
    seed_statistics = None
    if profile.seed_comparisons:
        by_design = across_seeds.design_rows(profile, rows)
        seed_statistics = {"designs": by_design, "tests": across_seeds.comparisons(profile, by_design)}
        table += "\n\n## Across seeds\n\n" + across_seeds.markdown(by_design, seed_statistics["tests"])
    summary = {
        "profile": profile.name,
        "description": profile.description,
        "runs": [asdict(r) for r in profile.runs],
        "rows": rows,
        "train_seconds": train_seconds,  # runs trained by this invocation: wall seconds of their processes
        # every run, trained now or reused: the wall seconds its training took, from its log
        "training_seconds": {run.name: logged_training_seconds(run_dir(out, run)) for run in profile.runs},
        "wall_seconds": {
            "train": trained - started,
            "evaluate": evaluated - trained,
            **{name: stage["wall_seconds"] for name, stage in stages.items()},
            "total": time.perf_counter() - started,
        },
        "stages": stages,
    }
    if seed_statistics is not None:
        summary["across_seeds"] = seed_statistics
    if profile.compare_designs:
        tests = seed_statistics["tests"] if seed_statistics else []
        summary["designs"] = compare_designs(profile, out, {row["run"]: row for row in rows}, tests, progress)
    write_json(out / "summary.json", summary)
    reported = time.perf_counter()
    build_report(out, out / "report.html", compressor=illustration(_illustrated_model(profile, out)))
    summary["wall_seconds"]["report"] = time.perf_counter() - reported
    summary["wall_seconds"]["total"] = time.perf_counter() - started
    if progress:
        tqdm.write(f"stage report: {summary['wall_seconds']['report']:.0f} s wall")
    figure = out / "report_figures" / "residues.png"
    if figure.is_file():
        shutil.copyfile(figure, out / figure_name(profile))
    document = results_document(profile, out, summary, table, jobs, with_figure=figure.is_file())
    write_text_atomic(out / f"{profile.name}.md", document)
    return {**summary, "table": table}


def compare_designs(
    profile: Profile, out: Path, rows: dict[str, dict], tests: list[dict], progress: bool = True
) -> list[dict]:
    """Write designs.json/.md (every design beside W8/S8 and full attention, with the profile's `tests` across
    seeds) and, so that the report shows the mechanism, the best design's knockout map (its best seed:
    analysis/knockout-<run>.json/.png) and gate cycling (analysis/cycle-<run>.json). Cycling is defined for
    W = S with learned gates only; when the best design is not such, the best learned W = S candidate is
    cycled instead and designs.json says so (`cycle_note`). Both are the profile's `design_analyses`, run by
    the stage runner on the chosen run (and cached like every analysis). Returns the design rows."""

    checkpoints = {run.name: final_checkpoint(out, run) for run in profile.runs}
    configs = {name: read_config(ckpt)[0] for name, ckpt in checkpoints.items()}
    runs = {run.name: run for run in profile.runs}
    knockout, cycle = profile.design_analyses
    table = designs.design_rows(profile, rows, configs, out)
    mechanism = {"knockout_run": None, "cycle_run": None, "cycle_note": None}
    best = designs.best_design(table)
    if best is not None:
        knocked = designs.best_seed(best)
        for path in run_stage(profile, out, knockout, [runs[knocked]], progress):
            plot_knockout(json.loads(path.read_text()), path.with_suffix(".png"))
        mechanism["knockout_run"] = knocked
        cycled, mechanism["cycle_note"] = designs.cycle_target(table, knocked, lambda r: cycling_problem(configs[r]))
        if cycled is not None:
            run_stage(profile, out, cycle, [runs[cycled]], progress)
            mechanism["cycle_run"] = cycled
    designs.write_designs(table, out, {**mechanism, "tests": tests})
    return table


def _illustrated_model(profile: Profile, out: Path) -> Path | None:
    """The checkpoint whose gates drive the report's compressor illustration: the first W = S run."""
    for run in profile.runs:
        if run.preset.startswith("w8s8-1kv") and not run.preset.endswith("uniform"):
            return final_checkpoint(out, run)
    return None


__all__ = ["PROFILES", "Profile", "RunSpec", "get_profile", "reproduce"]
