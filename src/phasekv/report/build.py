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


def scored_models(inputs: Inputs) -> list[dict]:
    """The model record of every result that has one (theory results have none)."""
    return [
        r.data["model"] for found in inputs.results.values() for r in found if isinstance(r.data.get("model"), dict)
    ]


def holds_a_compressor(inputs: Inputs, models: list[dict]) -> bool:
    """Whether the results are about a compressed KV cache: a model with a compression stride (its own compressor
    or a press), or results of a study only compressors have (gates, cycling, theory)."""
    if any(m.get("compression_stride") is not None or m.get("press") for m in models):
        return True
    return any(inputs.of(kind) for s in registry.STUDIES if s.applies is registry.own_compressor for kind in s.results)


def collect(inputs: Inputs, illustration: dict | None = None) -> tuple[dict, list[str]]:
    """(data for every present section, notes for the missing ones that could be run on the results' models). The
    compressor illustration is drawn when asked for (`illustration`) or when the results hold a compressor: a
    full-attention model has none to illustrate."""
    data, notes, models = {}, [], scored_models(inputs)
    for study in registry.STUDIES:
        block = study.figure.section(inputs)
        if block is not None:
            data[study.key] = block
        elif study.missing is not None and (not models or any(study.applies(m) for m in models)):
            notes.append(f"{study.title} left out: {study.missing} (make them with `{study.command}`).")
    if illustration is not None or holds_a_compressor(inputs, models):
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
            if "compressor" in data:
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
    sections = [study.key for study in present] + (["compressor"] if "compressor" in data else [])
    return ReportOutput(html=out, pngs=written, sections=sections, notes=notes)
