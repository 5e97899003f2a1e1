"""The grid-shift test of a probe run: the same prompts scored with the compression grid at every offset
(`stats.grid_shift`). Only models whose grid can move take it (`Scorer.grid_offset`: phasekv compressed models,
`pool:` presses, kvpress presses with a chunk grid);
black-box models get the position design alone, and the result says so."""

from __future__ import annotations

import numpy as np

from phasekv.scoring import Scorer
from phasekv.stats.grid_shift import GridShiftTest, grid_shift_test

from .scored import PromptScores, score_prompt_set

BLACK_BOX = "position design only: this model's compression grid cannot be moved"


def grid_period(scorer: Scorer) -> int | None:
    """The stride of a grid the scorer can move, else None."""
    if not hasattr(scorer, "grid_offset"):
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
) -> tuple[GridShiftTest, dict[str, np.ndarray]]:
    """Score `prompts` with the grid at every offset 0 .. S-1 and test whether the accuracy profile moves with
    it (units and identical prompts as the scores say); returns the test and the per-prompt outcome columns
    ``correct_grid_offset_{o}``. Raises ValueError (before any scoring) for a scorer whose grid cannot move.
    `unshifted`, the scores of the same prompts outside any `grid_offset`, stands in for the offset the
    scorer's grid already has (`unshifted_grid_offset`), so that grid is not scored twice."""
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
    test = grid_shift_test(
        scores.target_position,
        np.stack(outcomes),
        offsets,
        period,
        seed=seed,
        units=scores.unit,
        prompt_ids=scores.prompt_id,
        n_resamples=n_resamples,
    )
    columns = {f"correct_grid_offset_{o}": row.astype(int) for o, row in zip(offsets, outcomes, strict=True)}
    return test, columns
