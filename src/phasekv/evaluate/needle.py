"""The needle probe end to end: every haystack at every residue, so haystacks are the blocks.

A prompt is correct when greedy decoding produces the whole value (every value token is the
full-vocabulary top-1, teacher forced). Each haystack is placed at every residue, so outcomes are
paired within haystacks: the summary takes the per-(haystack, residue) cells like the lookup probe
(bootstrap over haystacks for every interval, residue labels permuted within haystacks), and the
verdict on phase sensitivity comes from `stats.phase_verdict` with haystacks as units.
"""

from __future__ import annotations

from ..scoring import Scorer
from ..stats.verdict import MIN_EFFECT_POINTS
from ..tasks.needle import NeedleOptions, needle_prompts
from .units import run_unit_probe


def run_needle(
    scorer: Scorer,
    options: NeedleOptions = NeedleOptions(),
    *,
    stride: int | None = None,
    n_resamples: int = 2000,
    progress: bool = True,
    grid_shift: bool = False,
    min_effect: float = MIN_EFFECT_POINTS,
) -> dict:
    """Generate, score and summarise a needle run; returns the result dict."""
    return run_unit_probe(
        "needle",
        scorer,
        options,
        needle_prompts,
        n_units=options.n_haystacks,
        unit="haystack",
        aggregation={
            "cell": "mean over the placements of one haystack in one residue group (cell_accuracy)",
            "bootstrap_unit": "haystack",
            "permutation": "residue labels of the cells shuffled within each haystack",
            "counts": "prompts = haystacks x placements per residue",
        },
        stride=stride,
        n_resamples=n_resamples,
        progress=progress,
        grid_shift=grid_shift,
        min_effect=min_effect,
    )
