"""The interactive HTML report (and PNG figures) drawn from result JSON files only.

`build_report(results_dir, out)` reads every result under `results_dir` (`load`), asks each study of
`phasekv.studies.registry` for its section (`figure.section`, `figure.section_html`), adds the compressor
illustration where the results hold a compressor, and writes one self-contained HTML file (no network) with PNGs of
the figures beside it. Every figure is one Vega-Lite spec built with altair: rendered to PNG by vl-convert and
embedded in the page, which inlines the Vega/Vega-Lite/vega-embed bundle once (`vega.py`). Sections without results
are left out, with a one-line note at the end of the page where the study could be run on the results' models.
"""

from .build import ReportOutput, build_report
from .load import ReportInputError, load_results

__all__ = ["ReportInputError", "ReportOutput", "build_report", "load_results"]
