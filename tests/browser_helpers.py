"""Headless Chromium for the report's browser tests: find (or install with scripts/install_chromium.sh) the browser,
skipping the test with the reason when there is none, run it, and read a page's own self-test (`?selftest=1`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _chromium() -> str | None:
    for name in (os.environ.get("PHASEKV_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def browser() -> str:
    """The Chromium binary; the test is skipped, with the reason, when there is none and none can be installed."""
    found = _chromium()
    if found is None and (ROOT / "scripts" / "install_chromium.sh").is_file():
        subprocess.run(["bash", str(ROOT / "scripts" / "install_chromium.sh")], capture_output=True, timeout=600)
        found = _chromium()
    if found is None:
        pytest.skip("chromium is not installed and scripts/install_chromium.sh could not install it")
    return found


def run_chromium(binary: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-quic",
        f"--user-data-dir={profile}",
        "--enable-logging=stderr",
        "--v=0",
        "--virtual-time-budget=4000",
    ]
    return subprocess.run([binary, *flags, *args], capture_output=True, text=True, timeout=90)


def dumped(dom: subprocess.CompletedProcess, element_id: str) -> dict:
    """The JSON a page wrote into the <pre> `element_id` of a `--dump-dom` run; fails the test when it wrote none."""
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(rf'<pre id="{element_id}"[^>]*>(.*?)</pre>', dom.stdout, re.S)
    assert found and found[1].strip(), f"the page wrote nothing into #{element_id}:\n" + dom.stderr[-2000:]
    return json.loads(found[1].replace("&gt;", ">").replace("&lt;", "<").replace("&amp;", "&"))


def selftest(binary: str, page: Path, profile: Path) -> tuple[dict, subprocess.CompletedProcess]:
    """(the outcome of `page`'s self-test, the Chromium run that produced it)."""
    dom = run_chromium(binary, profile, "--dump-dom", page.resolve().as_uri() + "?selftest=1")
    return dumped(dom, "selftest-result"), dom


def passed_selftest(binary: str, page: Path, profile: Path) -> set[str]:
    """The names of `page`'s self-test checks, after asserting that every one of them passed and that the page
    logged nothing to the console."""
    outcome, dom = selftest(binary, page, profile)
    failed = [c for c in outcome["checks"] if not c["pass"]]
    assert not failed and outcome["ok"], failed
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not console, console
    return {c["name"] for c in outcome["checks"]}


def screenshot(binary: str, page: Path, profile: Path, shot: Path, size: str = "1100,3400") -> Path:
    """A PNG of `page` at the window `size` (width,height), written to `shot`."""
    res = run_chromium(
        binary, profile, "--hide-scrollbars", f"--window-size={size}", f"--screenshot={shot}", page.resolve().as_uri()
    )
    assert res.returncode == 0 and shot.is_file() and shot.stat().st_size > 20000, res.stderr[-2000:]
    return shot
