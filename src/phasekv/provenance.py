"""Where a result came from: the code (version and commit), the software, and the machine.

Training floats repeat exactly on one machine and differ in the third digit between machines of one kind, so a
published table is only comparable with what it names here. Nothing in this module imports torch: the report and
the statistics read it too.
"""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

PACKAGES = ("phasekv", "torch", "transformers", "tokenizers", "numpy", "scipy")


def package_version(name: str) -> str:
    """The installed version of a package, or "not installed"."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def software_versions() -> dict[str, str]:
    """Versions of Python and the packages a result depends on."""
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        versions[name] = package_version(name)
    if versions["phasekv"] == "not installed":  # run from a source tree on PYTHONPATH (a lent GPU machine)
        from .version import __version__

        versions["phasekv"] = f"{__version__} (source tree)"
    return versions


def code_commit(path: Path | None = None) -> dict:
    """The git commit of the checkout that holds `path` (default: this package) and whether files tracked there
    differ from it; {"commit": None} outside a git checkout (an installed wheel)."""
    where = Path(path) if path is not None else Path(__file__).resolve().parent

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": None}
    changed = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "local_changes": bool(changed)}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError, AttributeError):
        return None


def machine_description() -> dict:
    """The CPU model, its cores (all, and those this process may use), memory, the OS and the load average now
    (a shared machine's wall times depend on it)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "memory_gib": _memory_gib(),
        "os": platform.platform(),
        "load_average": load,
    }


def provenance() -> dict:
    """Code, software and machine, with the time (UTC) they were read."""
    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "code": {"version": software_versions()["phasekv"], **code_commit()},
        "software": software_versions(),
        "machine": machine_description(),
    }
