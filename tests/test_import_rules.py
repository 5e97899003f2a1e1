"""The layering holds: import-linter's contracts (pyproject.toml) and, at run time, the torch-free
modules really import without torch (a static check cannot see what a package's __init__ pulls in)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept(monkeypatch, capsys):
    lint_imports = pytest.importorskip("importlinter.cli", reason="import-linter is in the [test] extra").lint_imports
    monkeypatch.chdir(ROOT)
    code = lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    assert code == 0, capsys.readouterr().out


def test_report_studies_results_stats_and_tasks_import_without_torch():
    modules = "phasekv.report, phasekv.cli.report, phasekv.results, phasekv.studies.registry, phasekv.stats"
    modules += ", phasekv.tasks.lookup"
    script = f"import sys, {modules}; print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", f"{modules} pulled in {out.strip()}"


@pytest.mark.parametrize("study", ["probe", "flip", "knockout", "gates", "cycle", "theory", "designs"])
def test_each_study_figure_imports_first(study):
    """A figure module imported before anything else (the registry imports every figure; no cycle breaks)."""
    subprocess.run([sys.executable, "-c", f"import phasekv.studies.{study}.figure"], check=True, capture_output=True)


def test_help_loads_no_torch():
    """`phasekv --help` and the groups' help import the command layer only (the library loads in the commands)."""
    script = (
        "import sys, phasekv.cli, phasekv.cli.evaluate, phasekv.cli.train, phasekv.cli.analyses, phasekv.cli.theory, "
        "phasekv.cli.report, phasekv.cli.serve; print(sorted(m for m in ('torch', 'transformers', 'altair') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out
