"""The lookup design the mechanistic analyses (knockout, gates, cycle) default to, in one place for their
commands and `phasekv.probe(model, "knockout")`: shorter prompts and fewer mappings than a probe's, since each
knocked-out head (or layer) costs a pass over every distinct prompt. Torch-free, so a command's options can
read it without loading a model."""

from __future__ import annotations

from phasekv.tasks.lookup import LookupOptions

ANALYSIS_LOOKUP = LookupOptions(n_records=32, n_demos=4, n_mappings=16)
