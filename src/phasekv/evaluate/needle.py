"""The needle probe end to end: every haystack at every residue, so haystacks are the blocks.

A prompt is correct when greedy decoding produces the whole value (every value token is the
full-vocabulary top-1, teacher forced). Each haystack is placed at every residue, so outcomes are
paired within haystacks: the summary takes the per-(haystack, residue) cells like the lookup probe
(bootstrap over haystacks for every interval, residue labels permuted within haystacks), and the
verdict on phase sensitivity comes from `stats.phase_verdict` with haystacks as units.
"""

from __future__ import annotations

from ..scoring import Scorer
from ..tasks.needle import NeedleOptions, needle_prompts
from .units import run_unit_probe


def run_needle(scorer: Scorer, options: NeedleOptions = NeedleOptions(), **run_options) -> dict:
    """Generate, score and summarise a needle run; returns the result dict. `run_options` go to
    `run_unit_probe` (stride, n_resamples, progress, grid_shift, min_effect)."""
    return run_unit_probe("needle", scorer, options, needle_prompts, "haystack", "haystack", **run_options)
