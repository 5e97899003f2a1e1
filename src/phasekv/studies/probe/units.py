"""Outcomes of a probe whose units (key-name mappings, haystacks) are each placed at every residue:
the per-(unit, residue) cells, the paired residue summary and the phase verdict, computed alike for
every such probe, and `run_unit_probe`, the run of any registered probe (`registry`) from prompts to result dict."""

from __future__ import annotations

from dataclasses import asdict, replace

import numpy as np

from phasekv.results.record import RunClock, prompt_prefix
from phasekv.scoring import Scorer
from phasekv.stats import ResidueSummary, phase_verdict, summarize_mappings
from phasekv.stats.phase_test import PhaseDesign
from phasekv.stats.power import minimum_detectable_effect
from phasekv.stats.stride import MODEL_GRID, PRESS_GRID, Period, default_period, phase_period, resolve_stride
from phasekv.stats.verdict import MAX_MDE_POINTS, MIN_EFFECT_POINTS, PhaseVerdict, rest_on_grid_shift

from .grid_shift import BLACK_BOX, grid_period, run_grid_shift
from .registry import Probe
from .registry import chance_level as chance_level  # where the tables' readers found it
from .scored import PromptScores, position_controls, prompt_id, score_prompt_set


def correctness_cube(scores: PromptScores, n_units: int, modulus: int, placements: int) -> np.ndarray:
    """correct[i, r, p] as a float array [n_units, M, P]; every cell must be filled once."""
    cube = np.full((n_units, modulus, placements), np.nan)
    cube[scores.unit, scores.residue, scores.placement] = scores.correct
    if np.isnan(cube).any() or len(scores.correct) != cube.size:
        raise ValueError("the prompts do not cover every (unit, residue, placement) exactly once")
    return cube


def unit_residue_cells(scores: PromptScores, n_units: int, modulus: int, placements: int) -> np.ndarray:
    """cells[i, r]: accuracy of unit i over its placements at residue r."""
    return correctness_cube(scores, n_units, modulus, placements).mean(axis=2)


def scorer_period(scorer: Scorer, stride: int | None, modulus: int) -> Period:
    """`stats.stride.default_period` of a run on `scorer`: its grid is a press's when it compresses with one."""
    grid = PRESS_GRID if scorer.describe().get("press") else MODEL_GRID
    return default_period(stride, scorer.compression_stride, modulus, grid)


PLANNING_ACCURACY = 0.7  # the accuracy a dry run assumes where the run has not measured one


def planned_mde(
    prompts,
    stride: int | None,
    modulus: int,
    chance: float,
    accuracy: float = PLANNING_ACCURACY,
    min_effect: float = MIN_EFFECT_POINTS,
    period: int | None = None,
) -> tuple[int, dict | None, str]:
    """(period, the minimum detectable effect of the phase verdict on these prompts at a flat `accuracy`,
    a note; `chance`: the probe's chance level, `Probe.chance`): what a dry run can say about a design before any
    scoring. `period`: the run's (`stats.stride.default_period`, which knows the compression grid); None: the
    period of `stride` and the modulus alone."""
    period = period or default_period(stride, None, modulus).value
    seen: dict = {}
    ids = [prompt_id(p, seen) for p in prompts]
    design = PhaseDesign([p.unit for p in prompts], [p.target_position for p in prompts], period, ids)
    if not design.testable:
        return period, None, "not testable at this period: widen the design (more spread blocks or a larger modulus)"
    mde = minimum_detectable_effect(
        design,
        np.full(design.cell_count.size, accuracy),
        0.05,
        min_effect,
        basis=f"a flat accuracy of {100 * accuracy:.0f}% (assumed before the run)",
        chance=chance,
    )
    return period, mde, f"at an assumed flat accuracy of {100 * accuracy:.0f}%; the run states its own MDE"


def summarize_units(
    scores: PromptScores,
    n_units: int,
    modulus: int,
    placements: int,
    *,
    stride: int | None,
    model_stride: int | None,
    seed: int,
    n_resamples: int,
    unit: str = "mapping",
    chance: float | None = None,
    min_effect: float = MIN_EFFECT_POINTS,
    max_mde: float = MAX_MDE_POINTS,
) -> tuple[np.ndarray, ResidueSummary, PhaseVerdict]:
    """(cells [n_units, M], the paired residue summary, the phase verdict) of one run.

    The summary resamples whole units and permutes residue labels within units
    (`stats.summarize_mappings`); the verdict resamples units, counts identical prompts once and states the
    run's minimum detectable effect (`stats.phase_verdict`).
    """
    cells = unit_residue_cells(scores, n_units, modulus, placements)
    summary = summarize_mappings(
        cells,
        stride=stride,
        n_resamples=n_resamples,
        n_permutations=n_resamples,
        seed=seed,
        trials_per_cell=placements,
        unit=unit,
    )
    period = phase_period(stride, model_stride, modulus)
    verdict = phase_verdict(
        scores.unit,
        scores.target_position,
        scores.correct,
        period,
        seed=seed,
        n_resamples=n_resamples,
        prompt_ids=scores.prompt_id,
        chance=chance,
        min_effect=min_effect,
        mde=True,
        max_mde=max_mde,
    )
    return cells, summary, verdict


def run_unit_probe(
    probe: Probe,
    scorer: Scorer,
    options,
    *,
    stride: int | None = None,
    n_resamples: int = 2000,
    progress: bool = True,
    grid_shift: bool = False,
    min_effect: float = MIN_EFFECT_POINTS,
    max_mde: float = MAX_MDE_POINTS,
) -> dict:
    """Generate, score and summarise a run of `probe` (its options: `options`), whose units (`probe.unit`:
    "mapping", "haystack"; `options.n_{unit}s` of them) are each placed at every residue; returns the result
    dict. `probe.prompts(tokenizer, options, prefix)` makes the prompt set. The bootstrap and the
    permutation tests are seeded with `options.seed`; `stride` overrides the period-check stride
    (`resolve_stride`). `grid_shift` also scores the prompts with the compression grid at every offset
    (`grid_shift`: models whose grid can move only, checked before any scoring). A null whose MDE exceeds
    `max_mde` points reads inconclusive."""
    if grid_shift and getattr(scorer, "grid_shift_refusal", None):  # a grid that moves per prompt (a dithered press)
        raise ValueError(scorer.grid_shift_refusal)
    if grid_shift and grid_period(scorer) is None:
        raise ValueError(
            "the grid shift (grid_shift, --grid-shift) needs a model whose compression grid can move (a phasekv model "
            "with a compressed KV "
            "cache, a pool: press, or a kvpress press with a chunk grid: ChunkKVPress, ChunkPress, BlockPress); "
            "for other models the verdict rests on the position design alone"
        )
    clock = RunClock()
    period = scorer_period(scorer, stride, options.modulus)
    stride, stride_source = resolve_stride(stride, scorer.compression_stride, options.modulus)
    prefix = prompt_prefix(scorer.tokenizer)
    unit = probe.unit
    prompt_set = probe.prompts(scorer.tokenizer, options, prefix)
    key_length = prompt_set.options["answer_offset"]  # the key phrase: tokens from t_K to the answer
    scores = score_prompt_set(scorer, prompt_set.prompts, key_length=key_length, desc=probe.name, progress=progress)
    n_units = getattr(options, f"n_{unit}s")
    per_unit = prompt_set.options[f"placements_per_{unit}"]
    cells, summary, verdict = summarize_units(
        scores,
        n_units,
        options.modulus,
        per_unit,
        stride=stride,
        model_stride=scorer.compression_stride,
        seed=options.seed,
        n_resamples=n_resamples,
        unit=unit,
        chance=probe.chance(options),
        min_effect=min_effect,
        max_mde=max_mde,
    )
    position_stats, controls = position_controls(scores, options.modulus)
    grid_columns = {}
    if grid_shift:
        shifted, grid_columns = run_grid_shift(
            scorer,
            prompt_set.prompts,
            key_length,
            seed=options.seed,
            progress=progress,
            unshifted=scores,
            n_resamples=n_resamples,
            alpha=verdict.alpha,
            min_effect=verdict.min_effect_points,
            chance=verdict.chance,
        )
        verdict = rest_on_grid_shift(verdict, shifted)
    elif grid_period(scorer) is not None:
        verdict = replace(
            verdict, basis="position design (the grid can move: run with --grid-shift for the causal test)"
        )
    else:
        verdict = replace(verdict, basis=BLACK_BOX)
    return clock.envelope(
        probe.name,
        scorer,
        prefix,
        protocol=getattr(options, "protocol", None),  # a probe with one record in its filler has no padding protocol
        seed=options.seed,
        options={**asdict(options), **prompt_set.options},
        requested_options=asdict(options),  # as asked (defaults unresolved): what `--like` re-runs
        n_prompts=len(scores.correct),
        stride={"value": stride, "source": stride_source},
        period=period.to_dict(),
        aggregation={
            "cell": f"mean over the placements of one {unit} in one residue group (cell_accuracy)",
            "bootstrap_unit": probe.bootstrap_unit,
            "permutation": f"residue labels of the cells shuffled within each {unit}",
            "counts": f"prompts = {unit}s x placements per residue",
            "intervals": {"per_residue": f"percentile bootstrap over {unit}s", **summary.stat_interval_methods},
            f"n_{unit}s": n_units,
            f"placements_per_{unit}": per_unit,
            "n_rows": int(cells.shape[0]),
        },
        summary=summary.to_dict(),
        phase_test=verdict.to_dict(),
        position_stats=position_stats,
        controls=controls,
        cell_accuracy=cells.round(6).tolist(),
        mean_answer_logprob=float(scores.logprob.mean()),
        prompt_records=scores.records(unit, grid_columns),
    )
