"""The lookup probe end to end, with the mapping bootstrap.

Aggregation. Each mapping i is placed `P` times in every residue group r (P =
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

The verdict on phase sensitivity comes from `stats.phase_verdict` (replication of the phase
profile across periods of consecutive target positions, robust to smooth effects of position),
under "phase_test"; the residue summary above stays as the paper's moment-matched figure.
"""

from __future__ import annotations

from dataclasses import asdict

from ..scoring import Scorer
from ..tasks.lookup import LookupOptions, lookup_prompts
from .record import RunClock, prompt_prefix
from .scored import position_controls, score_prompt_set
from .stride import resolve_stride
from .units import summarize_units


def run_lookup(
    scorer: Scorer,
    options: LookupOptions = LookupOptions(),
    *,
    stride: int | None = None,
    n_resamples: int = 2000,
    progress: bool = True,
) -> dict:
    """Generate, score and summarise a lookup run; returns the result dict (see module docstring).

    `stride` overrides the period-check stride (`resolve_stride`). The bootstrap and permutation
    test are seeded with `options.seed`.
    """
    clock = RunClock()
    stride, stride_source = resolve_stride(stride, scorer.compression_stride, options.modulus)
    prefix = prompt_prefix(scorer.tokenizer)
    prompt_set = lookup_prompts(scorer.tokenizer, options, prefix)
    key_length = prompt_set.options["answer_offset"]  # the key phrase: tokens from t_K to the answer
    scores = score_prompt_set(scorer, prompt_set.prompts, key_length=key_length, desc="lookup", progress=progress)
    per_mapping = prompt_set.options["placements_per_mapping"]
    cells, summary, verdict = summarize_units(
        scores,
        options.n_mappings,
        options.modulus,
        per_mapping,
        stride=stride,
        model_stride=scorer.compression_stride,
        seed=options.seed,
        n_resamples=n_resamples,
    )
    position_stats, controls = position_controls(scores, options.modulus)
    return clock.envelope(
        "lookup",
        scorer,
        prefix,
        protocol=options.protocol,
        seed=options.seed,
        options={**asdict(options), **prompt_set.options},
        n_prompts=len(scores.correct),
        stride={"value": stride, "source": stride_source},
        aggregation={
            "cell": "mean over the placements of one mapping in one residue group (cell_accuracy)",
            "bootstrap_unit": "mapping (resampled rows = one mapping's cells at every residue)",
            "permutation": "residue labels of the cells shuffled within each mapping",
            "counts": "prompts = mappings x placements per residue",
            "intervals": {
                "per_residue": "percentile bootstrap over mappings",
                **summary.stat_interval_methods,
            },
            "n_mappings": options.n_mappings,
            "placements_per_mapping": per_mapping,
            "n_rows": int(cells.shape[0]),
        },
        summary=summary.to_dict(),
        phase_test=verdict.to_dict(),
        position_stats=position_stats,
        controls=controls,
        cell_accuracy=cells.round(6).tolist(),
        mean_answer_logprob=float(scores.logprob.mean()),
        prompt_records=scores.records("mapping"),
    )
