"""The grid-shift test (stats.grid_shift, evaluate.grid_shift): a pattern that follows the compression grid moves
with it, one that follows position does not; end to end on a real phasekv model and on a stand-in whose grid moves."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from phasekv.evaluate import run_lookup
from phasekv.model import PhaseKVModel
from phasekv.model.presets import preset_config
from phasekv.scoring.phasekv_scorer import PhaseKVScorer
from phasekv.stats.format import format_verdict
from phasekv.stats.grid_shift import grid_shift_test
from phasekv.tasks import tokenizer
from phasekv.tasks.lookup import LookupOptions


def _outcomes(positions, offsets, weak, follows_grid, rng, period=8):
    rows = []
    for o in offsets:
        phase = (positions - o) % period if follows_grid else positions % period
        rows.append(rng.random(positions.size) < np.where(phase == weak, 0.1, 0.9))
    return np.array(rows, dtype=float)


def test_a_grid_pattern_moves_with_the_grid_and_a_position_pattern_does_not():
    rng = np.random.default_rng(0)
    positions = rng.integers(100, 180, 4000)
    offsets = np.arange(8)
    grid = grid_shift_test(positions, _outcomes(positions, offsets, 7, True, rng), offsets, 8)
    assert grid.moves_with_grid and grid.p_value < 0.01
    assert grid.grid_spread_points < 5 < grid.position_spread_points
    assert np.argmin(grid.by_grid[3]) == 7 and np.argmin(grid.by_position[3]) == (7 + 3) % 8
    position = grid_shift_test(positions, _outcomes(positions, offsets, 7, False, rng), offsets, 8)
    assert not position.moves_with_grid and position.p_value > 0.05
    assert position.position_spread_points < 5 < position.grid_spread_points
    small = grid_shift_test(
        positions, _outcomes(positions, np.arange(4), 1, True, rng, 4), np.arange(4), 4, n_shuffles=200
    )
    assert small.moves_with_grid and small.p_value == pytest.approx(1 / 201)  # S = 4 reaches small p too


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="two distinct offsets"):
        grid_shift_test([1, 2], [[0, 1]], [0], 8)
    with pytest.raises(ValueError, match=r"\[offsets, prompts\]"):
        grid_shift_test([1, 2, 3], [[0, 1], [1, 0]], [0, 1], 8)


class GridScorer:
    """A stand-in compressed model: wrong exactly when the target key sits at grid phase 3, (t_K - o) mod 4."""

    batch_size = 64
    compression_stride = 4

    def __init__(self):
        self.tokenizer = tokenizer.build_word_tokenizer()
        self.vocab_size = len(self.tokenizer)
        self.offset = 0

    def grid_offset(self, offset):
        scorer = self

        class Offset:
            def __enter__(self):
                scorer.offset = offset

            def __exit__(self, *exc):
                scorer.offset = 0

        return Offset()

    def logprobs(self, sequences, n_last=1):
        out = torch.zeros(len(sequences), n_last, self.vocab_size)
        for i, seq in enumerate(sequences):
            context = list(seq)[: len(seq) - n_last + 1]
            key = context[-1]
            t_k = context.index(key)
            answer = context[t_k + 1 : t_k + 1 + n_last]
            right = (t_k - self.offset) % 4 != 3
            for j, token in enumerate(answer):
                out[i, j, token if right else (token + 1) % self.vocab_size] = 10.0
        return torch.log_softmax(out, -1)

    def describe(self):
        return {"kind": "grid stand-in", "compression_stride": 4}


OPTIONS = LookupOptions(n_records=8, n_demos=2, modulus=8, n_mappings=4, spread_blocks=4, seed=3)


def test_the_probe_runs_the_grid_shift_and_says_what_the_verdict_rests_on():
    result = run_lookup(GridScorer(), OPTIONS, n_resamples=100, progress=False, grid_shift=True)
    phase = result["phase_test"]
    assert phase["grid_shift"]["moves_with_grid"] and phase["grid_shift"]["offsets"] == [0, 1, 2, 3]
    assert phase["basis"].startswith("position design and grid shift (the pattern moves")
    assert "grid shift over offsets" in format_verdict(phase)


def test_the_grid_shift_runs_on_a_phasekv_model_and_refuses_a_model_without_a_grid():
    torch.manual_seed(0)
    model = PhaseKVModel(preset_config("w8s4-1kv", vocab_size=len(tokenizer.build_word_tokenizer())))
    scorer = PhaseKVScorer(model)
    result = run_lookup(scorer, OPTIONS, n_resamples=50, progress=False, grid_shift=True)
    shifted = result["phase_test"]["grid_shift"]
    assert shifted["period"] == 4 and len(shifted["by_grid"]) == 4
    full = PhaseKVScorer(PhaseKVModel(preset_config("full-1kv", vocab_size=len(tokenizer.build_word_tokenizer()))))
    with pytest.raises(ValueError, match="grid can move"):
        run_lookup(full, OPTIONS, n_resamples=50, progress=False, grid_shift=True)
