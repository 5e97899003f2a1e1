"""The interactive HTML report (and PNG figures) drawn from result JSON files only.

`build_report(results_dir, out)` reads every result under `results_dir` (`load`), builds one data
block per figure section (`residues`, `flip`, `knockout`, `gates`, `cycle`, `theory`, `designs`,
`compressor`), and writes one self-contained HTML file (no network) with PNGs of the figures beside it.
Every figure is one Vega-Lite spec built with altair by its section's `spec()`: rendered to PNG by
vl-convert and embedded in the page, which inlines the Vega/Vega-Lite/vega-embed bundle once
(`vega.py`); `figures.py` writes the same specs for `phasekv knockout|gates|cycle --plot`. Only the
compressor illustration is drawn by the page's own script. Sections without results are left out
with a one-line note.
"""

from .build import ReportOutput, build_report
from .load import ReportInputError, load_results

__all__ = ["ReportInputError", "ReportOutput", "build_report", "load_results"]
