"""Run a probe end to end: generate prompts, score them, summarise by residue, write JSON.

`run_lookup` and `run_needle` take a scorer (`phasekv.scoring`) and return a JSON-serialisable result
dict; `write_results` writes it atomically. Result format: `phasekv.studies.probe.result`. The flip probe
is `phasekv.studies.flip`; the `phasekv eval` commands are `phasekv.cli.evaluate`.
"""

from .lookup import run_lookup
from .needle import run_needle
from .pattern import PhasePattern, best_pattern, pattern_test
from .record import SCHEMA, write_results
from .stride import resolve_period, resolve_stride

__all__ = [
    "SCHEMA",
    "PhasePattern",
    "best_pattern",
    "pattern_test",
    "resolve_period",
    "resolve_stride",
    "run_lookup",
    "run_needle",
    "write_results",
]
