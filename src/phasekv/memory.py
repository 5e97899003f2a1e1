"""Sizes checked against memory before they are allocated: a design or a batch too large for the machine is one
clear `ValueError` naming the option to lower, not a `MemoryError` traceback, a process the kernel kills, or
minutes of silence while the machine swaps.

Kept free of torch, so that the task builders (which the report's side imports) can use it.
"""

from __future__ import annotations

import os

# what one scored prompt holds at least besides its tokens (its Prompt, outcome, log-prob: Python objects), for
# the checks of a probe's size
PER_PROMPT_BYTES = 256


def available_bytes() -> int | None:
    """Memory this machine can still give (Linux: MemAvailable), else its physical memory; None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError, AttributeError):
        return None


def format_bytes(n: float) -> str:
    """`12 MB`, `3.4 GB`, `7.9e+09 GB`."""
    for unit, size in (("GB", 1e9), ("MB", 1e6)):
        if n >= size:
            value = n / size
            return f"{value:.3g} {unit}" if value < 1e6 else f"{value:.2g} {unit}"
    return f"{n / 1e3:.3g} kB"


def check_fits(n_bytes: float, what: str, advice: str, available: int | None = None) -> None:
    """ValueError when `what` needs more than the memory available (`available`, default: this machine's). The
    message says how much each needs and `advice` (what to lower)."""
    available = available_bytes() if available is None else available
    if available is not None and n_bytes > available:
        raise ValueError(
            f"{what} needs about {format_bytes(n_bytes)} of memory, more than the {format_bytes(available)} "
            f"available: {advice}"
        )
