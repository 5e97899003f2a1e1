"""The interactive HTML report (and PNG figures) drawn from result JSON files only.

`build_report(results_dir, out)` reads every result under `results_dir` (`load`), builds one data
block per figure section (`residues`, `flip`, `knockout`, `gates`, `cycle`, `theory`, `compressor`),
and writes one self-contained HTML file (no network) with PNG versions of the main figures beside it.
Figures migrated to Vega-Lite have one spec each (`vega.py`), rendered to PNG and embedded in the page
with the Vega bundle inlined once; the others are inline SVG drawn by the page's own script. Sections
without results are left out with a one-line note.
"""

from .build import ReportOutput, build_report
from .load import ReportInputError, load_results

__all__ = ["ReportInputError", "ReportOutput", "build_report", "load_results"]
