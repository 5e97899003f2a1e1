"""The grid-shift test of a probe run: the same prompts scored with the compression grid at every offset
(`stats.grid_shift`). Only models whose grid can move take it (`Scorer.grid_offset`: phasekv compressed models,
`pool:` presses, kvpress presses with a chunk grid);
black-box models get the position design alone, and the result says so.

`python -m phasekv.studies.probe.grid_shift RESULT.json ...` recomputes the test and its MDE from a result's
per-prompt records, without scoring anything (for results written before the test had an MDE)."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from phasekv.scoring import Scorer
from phasekv.stats.grid_shift import GridShiftDesign, GridShiftTest, grid_shift_test
from phasekv.stats.power import grid_shift_mde
from phasekv.stats.verdict import MIN_EFFECT_POINTS

from .scored import PromptScores, score_prompt_set

BLACK_BOX = "position design only: this model's compression grid cannot be moved"


def grid_period(scorer: Scorer) -> int | None:
    """The stride of a grid the scorer can move, else None (also for a grid drawn per prompt: a dithered press)."""
    if not hasattr(scorer, "grid_offset") or getattr(scorer, "grid_shift_refusal", None):
        return None
    return scorer.compression_stride


def run_grid_shift(
    scorer: Scorer,
    prompts,
    key_length: int,
    seed: int = 0,
    progress: bool = False,
    unshifted: PromptScores | None = None,
    n_resamples: int = 1000,
    alpha: float = 0.05,
    min_effect: float = MIN_EFFECT_POINTS,
    chance: float | None = None,
) -> tuple[GridShiftTest, dict[str, np.ndarray]]:
    """Score `prompts` with the grid at every offset 0 .. S-1 and test whether the accuracy profile moves with
    it (units and identical prompts as the scores say); returns the test and the per-prompt outcome columns
    ``correct_grid_offset_{o}``. Raises ValueError (before any scoring) for a scorer whose grid cannot move.
    `unshifted`, the scores of the same prompts outside any `grid_offset`, stands in for the offset the
    scorer's grid already has (`unshifted_grid_offset`), so that grid is not scored twice. The test carries its
    own minimum detectable effect (`stats.power.grid_shift_mde`) at ``alpha``, ``min_effect`` and ``chance``."""
    period = grid_period(scorer)
    if period is None or period < 2:
        raise ValueError(
            "the grid-shift test needs a model whose compression grid can move (a phasekv model with a "
            "compressed KV cache, a pool: press, or a kvpress press with a chunk grid); for other models the "
            "verdict rests on the position design alone"
        )
    offsets = np.arange(period)
    reused = getattr(scorer, "unshifted_grid_offset", None) if unshifted is not None else None
    outcomes, scores = [], unshifted
    for offset in offsets:
        if offset == reused:
            scores = unshifted
        else:
            with scorer.grid_offset(int(offset)):
                scores = score_prompt_set(
                    scorer, prompts, key_length=key_length, desc=f"grid {offset}", progress=progress
                )
        outcomes.append(scores.correct.astype(float))
    outcomes = np.stack(outcomes)
    test = grid_shift_test(
        scores.target_position,
        outcomes,
        offsets,
        period,
        alpha=alpha,
        seed=seed,
        units=scores.unit,
        prompt_ids=scores.prompt_id,
        n_resamples=n_resamples,
    )
    design = GridShiftDesign(scores.target_position, offsets, period, scores.unit, scores.prompt_id)
    test = replace(test, mde=grid_shift_mde(design, design.pool(outcomes), alpha, min_effect, seed=seed, chance=chance))
    columns = {f"correct_grid_offset_{o}": row.astype(int) for o, row in zip(offsets, outcomes, strict=True)}
    return test, columns


def identical_prompts_of_result(result: dict) -> np.ndarray:
    """Equal ids for identical prompts: the records' prompt_id; in files written before it was recorded, the
    prefix protocol's prompts of one unit with the same target and query position (the same tokens), and
    every prompt distinct in the other protocols."""
    columns = result["prompt_records"]["columns"]
    if "prompt_id" in columns:
        return np.asarray(columns["prompt_id"])
    if result.get("protocol") != "prefix":
        return np.arange(result["prompt_records"]["n"])
    keys = np.stack([columns[name] for name in ("unit", "target_position", "query_position")], axis=1)
    return np.unique(keys, axis=0, return_inverse=True)[1].ravel()


def grid_shift_of_result(result: dict, alpha: float = 0.05, min_effect: float | None = None) -> GridShiftTest:
    """The grid-shift test, with its MDE, recomputed from a result's per-prompt records (the columns
    ``correct_grid_offset_{o}``), with the result's seed, chance level and minimum effect unless given. Raises
    ValueError for a result whose grid was not moved."""
    columns = result.get("prompt_records", {}).get("columns", {})
    offsets = sorted(int(name.rsplit("_", 1)[1]) for name in columns if name.startswith("correct_grid_offset_"))
    if not offsets:
        raise ValueError(
            "this result has no grid-shift records (correct_grid_offset_*): it was run without the grid shift "
            "(grid_shift, --grid-shift)"
        )
    phase = result.get("phase_test") or {}
    min_effect = phase.get("min_effect_points", MIN_EFFECT_POINTS) if min_effect is None else min_effect
    chance = phase.get("chance")
    period = (phase.get("grid_shift") or {}).get("period", len(offsets))
    positions, units = np.asarray(columns["target_position"]), np.asarray(columns["unit"])
    outcomes = np.array([columns[f"correct_grid_offset_{o}"] for o in offsets], dtype=float)
    ids, seed = identical_prompts_of_result(result), int(result.get("seed", 0))
    stored = (phase.get("grid_shift") or {}).get("n_bootstrap")
    resamples = {"n_resamples": int(stored)} if stored else {}  # the run's own, where recorded
    test = grid_shift_test(
        positions, outcomes, offsets, period, alpha=alpha, seed=seed, units=units, prompt_ids=ids, **resamples
    )
    design = GridShiftDesign(positions, offsets, period, units, ids)
    return replace(test, mde=grid_shift_mde(design, design.pool(outcomes), alpha, min_effect, seed=seed, chance=chance))


def main(argv: list[str] | None = None) -> None:
    paths = argv if argv is not None else sys.argv[1:]
    if not paths:
        raise SystemExit("usage: python -m phasekv.studies.probe.grid_shift RESULT.json [RESULT.json ...]")
    from phasekv.stats.format import format_mde

    for path in paths:
        result = json.loads(Path(path).read_text())
        test = grid_shift_of_result(result)
        low, high = test.amplitude_ci or (float("nan"), float("nan"))
        print(
            f"{path}: {result.get('label') or result['model'].get('path', '')}: grid-phase amplitude "
            f"{test.amplitude_points:.1f} [{low:.1f}, {high:.1f}] points, shuffle p {test.p_value:.4g}, "
            f"P={test.period}, {test.n_distinct_prompts} distinct of {test.n_prompts} prompts; "
            f"{format_mde(test.mde, 'grid shift')}"
        )


if __name__ == "__main__":
    main()
