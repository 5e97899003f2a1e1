"""`phasekv reproduce`: pretrain models that differ only in their attention, probe them by phase,
and write the paper-style table and figure."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

from ..report import build_report
from .profiles import PROFILES, Profile, RunSpec, get_profile
from .report import markdown_table, table_rows
from .runner import evaluate_all, final_checkpoint, train_all, write_json


def reproduce(profile: Profile | str, out: str | Path, jobs: int | None = None, progress: bool = True) -> dict:
    """Train (or reuse) every run of `profile` in `out`, evaluate them, write table.md, summary.json and
    report.html (with report_figures/residues.png); returns the summary."""
    profile = get_profile(profile) if isinstance(profile, str) else profile
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    train_seconds = train_all(profile, out, jobs or profile.jobs, progress)
    trained = time.perf_counter()
    results = evaluate_all(profile, out, progress)
    rows = table_rows(results)
    table = markdown_table(rows)
    (out / "table.md").write_text(f"# Reproduction ({profile.name} profile)\n\n{table}\n")
    summary = {
        "profile": profile.name,
        "description": profile.description,
        "runs": [asdict(r) for r in profile.runs],
        "rows": rows,
        "train_seconds": train_seconds,
        "wall_seconds": {
            "train": trained - started,
            "evaluate": time.perf_counter() - trained,
            "total": time.perf_counter() - started,
        },
    }
    write_json(out / "summary.json", summary)
    build_report(out, out / "report.html", model=_illustrated_model(profile, out))
    return {**summary, "table": table}


def _illustrated_model(profile: Profile, out: Path) -> Path | None:
    """The checkpoint whose gates drive the report's compressor illustration: the first W = S run."""
    for run in profile.runs:
        if run.preset.startswith("w8s8-1kv") and not run.preset.endswith("uniform"):
            return final_checkpoint(out, run)
    return None


__all__ = ["PROFILES", "Profile", "RunSpec", "get_profile", "reproduce"]
