"""The interactive HTML report (and PNG figures) drawn from result JSON files only.

`build_report(results_dir, out)` reads every result under `results_dir` (`load`), builds one data
block per figure section (`residues`, `flip`, `knockout`, `gates`, `cycle`, `theory`, `compressor`),
and writes one self-contained HTML file (inline SVG + JavaScript, no network) with PNG versions of
the main figures beside it. Sections without results are left out with a one-line note.
"""

from .build import ReportOutput, build_report
from .load import ReportInputError, load_results

__all__ = ["ReportInputError", "ReportOutput", "build_report", "load_results"]
