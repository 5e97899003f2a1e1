"""Build the report: read the results, make each section's data, write the HTML and the PNGs."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from phasekv.studies import registry

from ..files import write_text_atomic
from ..studies.gates import compressor_figure
from .html import page
from .load import Inputs, ReportInputError, load_results


@dataclass
class ReportOutput:
    html: Path
    pngs: list[Path] = field(default_factory=list)
    sections: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def collect(inputs: Inputs, illustration: dict | None = None) -> tuple[dict, list[str]]:
    """(data for every present section, notes for the missing ones)."""
    data, notes = {}, []
    for study in registry.STUDIES:
        block = study.figure.section(inputs)
        if block is None and study.missing is not None:
            notes.append(f"{study.title} left out: {study.missing} (make them with `{study.command}`).")
        elif block is not None:
            data[study.key] = block
    data["compressor"], note = compressor_figure.section(illustration)
    if note:
        notes.append(note)
    return data, notes


def build_report(
    results_dir: str | Path,
    out: str | Path = "report.html",
    compressor: dict | None = None,
    pngs: bool = True,
) -> ReportOutput:
    """Write the HTML report of every result under `results_dir` to `out` and PNGs beside it
    (`<out stem>_figures/`, whose PNGs this build did not write are removed). Raises ReportInputError for a
    malformed result file."""
    out = Path(out)
    inputs = load_results(results_dir)
    if not any(inputs.results.values()):
        other = f" ({len(inputs.ignored)} JSON file(s) of another kind: {', '.join(inputs.ignored[:3])})"
        raise ReportInputError(
            f"no phasekv result files under {results_dir}{other if inputs.ignored else ''}: "
            "give a folder or file written by phasekv eval, knockout, gates, cycle, theory or reproduce"
        )
    data, notes = collect(inputs, compressor)
    present = [study for study in registry.STUDIES if study.key in data]
    count = sum(len(v) for v in inputs.results.values())
    subtitle = (
        f"From {count} result file{'s' if count != 1 else ''} under {Path(results_dir)}; "
        f"generated {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} by phasekv report."
    )
    written = []
    html = page(data, notes, "phasekv report", subtitle)
    if not pngs:
        write_text_atomic(out, html)
    else:
        # The figures are drawn into a hidden folder and moved into place just before the page is written, so
        # an interrupted build (Ctrl-C) leaves the previous figures and page as they were.
        fig_dir = out.parent / f"{out.stem}_figures"
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{fig_dir.name}.", dir=out.parent))
        try:
            drawn = []
            for study in present:
                drawn += study.figure.png(data[study.key], inputs, staging)
            drawn += compressor_figure.png(data["compressor"], inputs, staging)
            fig_dir.mkdir(exist_ok=True)
            written = [fig_dir / path.relative_to(staging) for path in drawn]
            for path, target in zip(drawn, written, strict=True):
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(path, target)
            for stale in set(fig_dir.glob("*.png")) - set(written):  # an earlier build's figure of a result now gone
                stale.unlink()
            write_text_atomic(out, html)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return ReportOutput(html=out, pngs=written, sections=[study.key for study in present] + ["compressor"], notes=notes)
