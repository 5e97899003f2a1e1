"""Build the report: read the results, make each section's data, write the HTML and the PNGs."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from ..files import write_text_atomic
from . import compressor, cycle, designs, flip, gates, knockout, residues, theory
from .html import page
from .load import Inputs, load_results

# section key -> (module, what is missing when it is left out, the command that makes it)
SECTIONS = {
    "residues": (residues, "no lookup or needle results", "phasekv eval lookup|needle ... --out DIR/x.json"),
    "flip": (flip, "no flip results", "phasekv eval flip ... --out"),
    "knockout": (knockout, "no knockout results", "phasekv knockout ... --out DIR"),
    "gates": (gates, "no gate results or training gate snapshots", "phasekv gates ... --out DIR"),
    "cycle": (cycle, "no gate cycling results", "phasekv cycle ... --out DIR"),
    "theory": (theory, "no theory results", "phasekv theory theorem2|sweep --out"),
    "designs": (designs, None, "phasekv reproduce --profile mitigations"),  # None: not noted when absent
}
TITLES = {
    "residues": "Accuracy by residue",
    "flip": "Flip probe",
    "knockout": "Knockout map",
    "gates": "Gate plane",
    "cycle": "Gate cycling",
    "theory": "Theory",
    "designs": "Designs against the weak spots",
}


@dataclass
class ReportOutput:
    html: Path
    pngs: list[Path] = field(default_factory=list)
    sections: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def collect(inputs: Inputs, illustration: dict | None = None) -> tuple[dict, list[str]]:
    """(data for every present section, notes for the missing ones)."""
    data, notes = {}, []
    for key, (module, missing, command) in SECTIONS.items():
        block = module.section(inputs)
        if block is None and missing is not None:
            notes.append(f"{TITLES[key]} left out: {missing} (make them with `{command}`).")
        elif block is not None:
            data[key] = block
    data["compressor"], note = compressor.section(illustration)
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
    (`<out stem>_figures/`). Raises ReportInputError for a malformed result file."""
    out = Path(out)
    inputs = load_results(results_dir)
    data, notes = collect(inputs, compressor)
    present = [k for k in SECTIONS if k in data]
    if not present:
        notes.insert(0, f"No result files found under {results_dir}: only the compressor illustration is shown.")
    count = sum(len(v) for v in inputs.results.values())
    subtitle = (
        f"From {count} result file{'s' if count != 1 else ''} under {Path(results_dir)}; "
        f"generated {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} by phasekv report."
    )
    written = []
    if pngs:
        fig_dir = out.parent / f"{out.stem}_figures"
        for key in present:
            written += SECTIONS[key][0].png(data[key], inputs, fig_dir)
    write_text_atomic(out, page(data, notes, "phasekv report", subtitle))
    return ReportOutput(html=out, pngs=written, sections=present + ["compressor"], notes=notes)
