"""The residue probes end to end: `run_probe(name, scorer, options)` runs any registered probe (`registry`;
`run_lookup`, `run_needle`) on a scorer (`phasekv.scoring`) and returns a JSON-serialisable
result dict (format: `studies.probe.result`); `results.record.write_results` writes it.

Lookup, with the mapping bootstrap. Aggregation. Each mapping i is placed `P` times in every residue group r (P =
placements_per_mapping, chosen so that the groups' target-position moments are exact), giving a
0/1 array correct[i, r, p]. The per-(mapping, residue) cell is the mean over its P placements,
`cell_accuracy[i, r]` in [0, 1], recorded in the results; per-residue accuracy is the mean of the
cells over mappings (= correct prompts / prompts). `stats.summarize_mappings` takes these
fractional cells, so the bootstrap resamples whole mappings (all placements of a mapping at all
residues together: placements of one mapping are correlated through its difficulty) and the
permutation test shuffles residue labels of the cells within each mapping. Counts in the summary
are prompts (n_mappings x P per residue). Intervals: percentile for per-residue accuracy and the
mean, basic (reverse percentile) for worst, best, gap and period difference. The results say so
under "aggregation".

The verdict on phase sensitivity comes from `stats.phase_verdict` (the phase frequencies k/P against
their neighbours after each mapping's smooth curve, robust to smooth effects of position at any sample
size, with the phase amplitude and the run's minimum detectable effect), under "phase_test"; the residue
summary above stays as the paper's moment-matched figure.

Needle: every haystack at every residue, so haystacks are the blocks. A prompt is correct when greedy decoding
produces the whole value (every value token is the full-vocabulary top-1, teacher forced). Each haystack is
placed at every residue, so outcomes are paired within haystacks: the summary takes the per-(haystack, residue)
cells like the lookup probe (bootstrap over haystacks for every interval, residue labels permuted within
haystacks), and the verdict on phase sensitivity comes from `stats.phase_verdict` with haystacks as units.
"""

from __future__ import annotations

from phasekv.scoring import Scorer
from phasekv.tasks.lookup import LookupOptions
from phasekv.tasks.needle import NeedleOptions

from .registry import get
from .units import run_unit_probe


def run_probe(name: str, scorer: Scorer, options=None, **run_options) -> dict:
    """Generate, score and summarise a run of the registered probe `name` (`registry`) with `options` (None: its
    options class's defaults); returns the result dict. `run_options` go to `run_unit_probe`: `stride` overrides
    the period-check stride (`resolve_stride`), `n_resamples` (2000), `progress` (True), `grid_shift`,
    `min_effect`, `max_mde`. The bootstrap and permutation test are seeded with `options.seed`."""
    probe = get(name)
    options = probe.options() if options is None else options
    if not isinstance(options, probe.options):
        raise TypeError(f"the {name} probe takes {probe.options.__name__}, not {type(options).__name__}")
    return run_unit_probe(probe, scorer, options, **run_options)


def run_lookup(scorer: Scorer, options: LookupOptions = LookupOptions(), **run_options) -> dict:
    """A lookup run (see the module docstring; `run_options` as `run_probe`'s)."""
    return run_probe("lookup", scorer, options, **run_options)


def run_needle(scorer: Scorer, options: NeedleOptions = NeedleOptions(), **run_options) -> dict:
    """A needle run (`run_options` as `run_probe`'s)."""
    return run_probe("needle", scorer, options, **run_options)
