"""Run a probe end to end: generate prompts, score them, summarise by residue, write JSON.

`run_lookup`, `run_needle` and `run_flip` take a scorer (`phasekv.scoring`) and return a
JSON-serialisable result dict; `write_results` writes it atomically. `cli.eval_app` is the
`phasekv eval` command group. Result schema: see `record.SCHEMA` and the run functions.
"""

from .flip import FlipOptions, format_flip, run_flip
from .lookup import run_lookup
from .needle import run_needle
from .pattern import PhasePattern, best_pattern, pattern_test
from .record import SCHEMA, write_results
from .stride import resolve_period, resolve_stride

__all__ = [
    "SCHEMA",
    "FlipOptions",
    "PhasePattern",
    "best_pattern",
    "format_flip",
    "pattern_test",
    "resolve_period",
    "resolve_stride",
    "run_flip",
    "run_lookup",
    "run_needle",
    "write_results",
]
