"""The grid-shift test (stats.grid_shift, studies.probe.grid_shift): a pattern that follows the compression grid moves
with it, one that follows position does not; end to end on a real phasekv model and on a stand-in whose grid moves."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import numpy as np
import pytest
import torch

from phasekv.model import PhaseKVModel
from phasekv.model.presets import preset_config
from phasekv.scoring.phasekv_scorer import PhaseKVScorer
from phasekv.stats.format import format_verdict, verdict_cell
from phasekv.stats.grid_shift import GridShiftDesign, grid_shift_test
from phasekv.stats.power import grid_shift_mde
from phasekv.stats.verdict import phase_verdict, rest_on_grid_shift
from phasekv.studies.probe.grid_shift import grid_shift_of_result, main
from phasekv.studies.probe.run import run_lookup
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
    with pytest.raises(ValueError, match=r"^the grid-shift test needs at least two distinct offsets, got \[0\]$"):
        grid_shift_test([1, 2], [[0, 1]], [0], 8)
    with pytest.raises(ValueError, match=r"two distinct offsets, got \[2, 2\]$"):
        grid_shift_test([1, 2], [[0, 1], [1, 0]], [2, 2], 8)
    shape = r"^outcomes must be \[offsets, prompts\] = \[2, 3\], got shape \(2, 2\)$"
    with pytest.raises(ValueError, match=shape):
        grid_shift_test([1, 2, 3], [[0, 1], [1, 0]], [0, 1], 8)
    with pytest.raises(ValueError, match=r"got shape \(3,\)$"):
        grid_shift_test([1, 2, 3], [0, 1, 1], [0, 1], 8)
    for offsets in ([0, 4], [-1, 0]):
        with pytest.raises(ValueError, match=rf"^offsets must lie in \[0, 4\), got {re.escape(str(offsets))}$"):
            grid_shift_test([1, 2], [[0, 1], [1, 0]], offsets, 4)
    assert grid_shift_test([1, 2], [[0, 1], [1, 0]], [0, 3], 4, n_shuffles=2).offsets == [0, 3]  # the edges are in


def _reference_profiles(positions, outcomes, offsets, period):
    """Accuracy (percent) by grid phase (t - o) mod P and by position phase t mod P, a plain loop over prompts."""
    by_grid, by_position = np.zeros((len(offsets), period)), np.zeros((len(offsets), period))
    for row, o in enumerate(offsets):
        for profile, shift in ((by_grid, o), (by_position, 0)):
            sums, counts = np.zeros(period), np.zeros(period)
            for t, y in zip(positions, outcomes[row], strict=True):
                sums[(t - shift) % period] += y
                counts[(t - shift) % period] += 1
            profile[row] = 100 * sums / np.maximum(counts, 1)
    return by_grid, by_position


def _rms_spread(profiles):
    """Root mean square deviation of the profiles from their mean over offsets (points)."""
    return float(np.sqrt(np.mean((profiles - profiles.mean(axis=0)) ** 2)))


def test_the_profiles_and_spreads_match_a_plain_loop():
    rng = np.random.default_rng(5)
    positions = rng.integers(40, 90, 120)
    offsets = np.array([0, 2, 3])
    outcomes = (rng.random((3, 120)) < 0.3 + 0.5 * ((positions - offsets[:, None]) % 4 == 1)).astype(float)
    result = grid_shift_test(positions, outcomes, offsets, 4, n_shuffles=20)
    by_grid, by_position = _reference_profiles(positions, outcomes, offsets, 4)
    assert result.by_grid == np.round(by_grid, 3).tolist()  # percent, to three decimals
    assert result.by_position == np.round(by_position, 3).tolist()
    assert result.grid_spread_points == pytest.approx(_rms_spread(by_grid), rel=1e-9)
    assert result.position_spread_points == pytest.approx(_rms_spread(by_position), rel=1e-9)
    assert result.offsets == [0, 2, 3] and result.period == 4 and result.n_shuffles == 20
    assert result.to_dict()["by_grid"] == result.by_grid and "shuffled per distinct prompt" in result.method
    empty_phase = grid_shift_test(np.array([8, 9, 10, 12]), np.ones((2, 4)), [0, 1], 4, n_shuffles=5)
    assert empty_phase.by_position[0] == [100.0, 100.0, 100.0, 0.0]  # phase 3 has no prompt: 0, not a NaN


def test_a_noise_free_grid_pattern_has_the_smallest_p_value_and_alpha_decides_at_it():
    """Wrong exactly at grid phase 3: the grid profiles agree (spread 0), the position profiles are rotations of
    [100, 100, 100, 0] (spread sqrt(1875) points), no shuffle aligns the pattern as well (p = 1 / 21); the pattern
    moves with the grid at alpha above that p and not at alpha equal to it."""
    positions = np.arange(100, 300)
    offsets = np.arange(4)
    outcomes = ((positions[None, :] - offsets[:, None]) % 4 != 3).astype(float)
    grid = grid_shift_test(positions, outcomes, offsets, 4, n_shuffles=20, seed=1)
    assert grid.by_grid == [[100.0, 100.0, 100.0, 0.0]] * 4
    assert grid.by_position[1] == [0.0, 100.0, 100.0, 100.0]  # offset 1: grid phase 3 is position phase 0
    assert grid.grid_spread_points == 0.0 and grid.position_spread_points == pytest.approx(np.sqrt(1875))
    assert grid.p_value == pytest.approx(1 / 21) and grid.moves_with_grid
    assert not grid_shift_test(positions, outcomes, offsets, 4, alpha=1 / 21, n_shuffles=20, seed=1).moves_with_grid
    assert grid_shift_test(positions, outcomes, offsets, 4, alpha=1 / 21 + 1e-9, n_shuffles=20, seed=1).moves_with_grid
    # a pattern of position alone: every shuffle gives the observed contrast, so p = 1, and it stays put
    position = grid_shift_test(positions, np.tile(positions % 4 != 3, (4, 1)), offsets, 4, n_shuffles=20)
    assert position.p_value == 1.0 and not position.moves_with_grid
    assert position.grid_spread_points == pytest.approx(np.sqrt(1875)) and position.position_spread_points == 0.0
    # a p below alpha is not enough: the grid profiles must also agree better than the position profiles
    flat = grid_shift_test(positions, np.ones((4, 200)), offsets, 4, alpha=1.01, n_shuffles=20)
    assert flat.p_value == 1.0 and not flat.moves_with_grid  # equal spreads (0 and 0): not the grid's


def test_the_p_value_matches_a_plain_shuffle_loop():
    """The null shuffles each prompt's outcomes across the offsets (never across prompts; a prompt with one outcome
    at every offset is left as it is); the statistic is the variance over grid phases of the grid-phase profile
    averaged over the offsets (from the plain loop)."""
    rng = np.random.default_rng(8)
    positions = rng.integers(0, 40, 60)
    offsets = np.array([0, 1, 3])
    outcomes = (rng.random((3, 60)) < 0.5 + 0.2 * ((positions - offsets[:, None]) % 4 == 2)).astype(float)

    def contrast(y):
        profile = _reference_profiles(positions, y, offsets, 4)[0].mean(axis=0) / 100
        return np.mean((profile - profile.mean()) ** 2)

    draws = np.random.default_rng(5)
    varying = [n for n in range(60) if len(set(outcomes[:, n])) > 1]  # a constant prompt is its own shuffle
    shuffled = []
    for _ in range(30):
        order = np.argsort(draws.random((3, len(varying))), axis=0)
        y = outcomes.copy()
        for column, n in enumerate(varying):
            y[:, n] = outcomes[order[:, column], n]
        shuffled.append(contrast(y))
    expected = (1 + sum(t >= contrast(outcomes) - 1e-8 for t in shuffled)) / 31
    result = grid_shift_test(positions, outcomes, offsets, 4, n_shuffles=30, seed=5)
    assert result.p_value == pytest.approx(expected) and 1 / 31 < expected < 1
    assert grid_shift_test(positions, outcomes, offsets, 4, n_shuffles=30) == grid_shift_test(
        positions, outcomes, offsets, 4, n_shuffles=30, seed=0
    )
    # the default alpha is 0.05: a p above it does not move with the grid, whatever the spreads say
    default = grid_shift_test(positions, outcomes, offsets, 4, n_shuffles=30, seed=5)
    assert default.grid_spread_points < default.position_spread_points and not default.moves_with_grid
    assert grid_shift_test(positions, outcomes, offsets, 4, alpha=0.99, n_shuffles=30, seed=5).moves_with_grid
    # offsets read from a file as floats are offsets all the same
    floats = grid_shift_test(positions, outcomes, offsets.astype(float), 4, n_shuffles=30, seed=5)
    assert floats == result


def test_the_shuffles_are_seeded_and_counted():
    rng = np.random.default_rng(2)
    positions = rng.integers(0, 40, 60)
    outcomes = (rng.random((4, 60)) < 0.5).astype(float)
    first = grid_shift_test(positions, outcomes, np.arange(4), 4, n_shuffles=30, seed=7)
    assert first == grid_shift_test(positions, outcomes, np.arange(4), 4, n_shuffles=30, seed=7)
    assert 0 < first.p_value <= 1 and round(first.p_value * 31) == pytest.approx(first.p_value * 31)
    others = {grid_shift_test(positions, outcomes, np.arange(4), 4, n_shuffles=30, seed=s).p_value for s in range(8)}
    assert len(others) > 1  # the seed draws the shuffles


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


def test_the_probe_runs_the_grid_shift_and_its_verdict_rests_on_it():
    result = run_lookup(GridScorer(), OPTIONS, n_resamples=100, progress=False, grid_shift=True)
    phase = result["phase_test"]
    assert phase["grid_shift"]["moves_with_grid"] and phase["grid_shift"]["offsets"] == [0, 1, 2, 3]
    assert phase["basis"].startswith("grid shift (the pattern moves with the grid")
    # wrong exactly at grid phase 3: 0% there, 100% elsewhere, whatever the position
    assert phase["verdict"] == "phase-sensitive" and phase["effect_points"] == pytest.approx(100)
    assert phase["p_value"] == phase["grid_shift"]["p_value"] and "grid-shift p" in phase["rule"]
    assert phase["grid_shift"]["profile_points"] == pytest.approx([25, 25, 25, -75])
    assert phase["position_design"]["verdict"] and phase["position_design"]["period"] == 4
    # the null each test could have missed: the grid shift's own MDE is the verdict's, the position design's beside it
    assert "grid phase" in phase["mde"]["what"] and phase["mde"] == phase["grid_shift"]["mde"]
    assert phase["mde"]["points"] is not None and "grid phase" not in phase["position_design"]["mde"]["what"]
    text = format_verdict(phase)
    assert "grid shift over offsets" in text and "position design alone:" in text and "grid-phase profile" in text
    assert verdict_cell(phase).startswith("phase-sensitive (100.0 [") and "position design: " in verdict_cell(phase)
    columns = result["prompt_records"]["columns"]
    assert [c for c in columns if c.startswith("correct_grid_offset_")] == [
        f"correct_grid_offset_{o}" for o in range(4)
    ]
    assert columns["correct_grid_offset_0"] == columns["correct"]
    positions = np.array(columns["target_position"])
    assert columns["correct_grid_offset_2"] == ((positions - 2) % 4 != 3).astype(int).tolist()


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


class CountingGridScorer(GridScorer):
    """The stand-in, saying where its grid starts outside `grid_offset` and counting the prompts it scores."""

    unshifted_grid_offset = 0

    def __init__(self):
        super().__init__()
        self.scored = 0

    def logprobs(self, sequences, n_last=1):
        self.scored += len(sequences)
        return super().logprobs(sequences, n_last)


def test_the_grid_in_place_is_scored_once_and_the_shift_result_is_unchanged():
    once, counting, plain = CountingGridScorer(), CountingGridScorer(), GridScorer()
    run_lookup(once, OPTIONS, n_resamples=100, progress=False)
    reused = run_lookup(counting, OPTIONS, n_resamples=100, progress=False, grid_shift=True)
    scored_twice = run_lookup(plain, OPTIONS, n_resamples=100, progress=False, grid_shift=True)
    assert counting.scored == 4 * once.scored  # S scorings in all: offset 0 is the unshifted scoring
    assert reused["phase_test"]["grid_shift"] == scored_twice["phase_test"]["grid_shift"]


@pytest.mark.parametrize("offsets", [(2, 2), (0, 2)])
def test_a_phasekv_model_reuses_the_offset_its_windows_have_and_only_that_one(monkeypatch, offsets):
    torch.manual_seed(0)
    config = preset_config("w8s4-1kv", vocab_size=len(tokenizer.build_word_tokenizer()))
    config = replace(config, compression=replace(config.compression, offsets=offsets))
    scorer = PhaseKVScorer(PhaseKVModel(config))
    assert scorer.unshifted_grid_offset == (2 if offsets == (2, 2) else None)
    entered, window_offset = [], scorer.model.window_offset

    def recording(offset):
        entered.append(offset)
        return window_offset(offset)

    monkeypatch.setattr(scorer.model, "window_offset", recording)
    result = run_lookup(scorer, OPTIONS, n_resamples=50, progress=False, grid_shift=True)
    assert entered == ([0, 1, 3] if offsets == (2, 2) else [0, 1, 2, 3])
    monkeypatch.setattr(type(scorer), "unshifted_grid_offset", None)  # every grid scored under grid_offset
    assert (
        run_lookup(scorer, OPTIONS, n_resamples=50, progress=False, grid_shift=True)["phase_test"]
        == result["phase_test"]
    )


def _copies(rng, n_distinct, copies, n_units):
    """Positions, units and prompt ids of a design that repeats each distinct prompt `copies` times."""
    positions = np.repeat(rng.integers(100, 228, n_distinct), copies)
    units = np.repeat(rng.integers(0, n_units, n_distinct), copies)
    return positions, units, np.repeat(np.arange(n_distinct), copies)


def test_identical_prompts_share_one_shuffle_so_a_grid_that_does_not_matter_is_not_rejected():
    """A grid that changes each distinct prompt's answer at random (exchangeable offsets) with a steep effect of
    position: copies of a prompt answer alike, so they are one observation. Shuffled as if they were independent,
    the null's profiles are too smooth and the test rejects far more often than alpha."""
    rng = np.random.default_rng(11)
    offsets = np.arange(8)
    rejected, below_alpha, below_alpha_as_independent = 0, 0, 0
    for _ in range(100):
        positions, units, ids = _copies(rng, 60, 20, 6)
        accuracy = 0.2 + 0.7 * ((positions[::20] - 100) / 128) ** 2  # a steep U in position, per distinct prompt
        outcomes = (rng.random((8, 60)) < accuracy).astype(float)[:, ids]
        shared = grid_shift_test(
            positions, outcomes, offsets, 8, n_shuffles=100, units=units, prompt_ids=ids, n_resamples=0
        )
        alone = grid_shift_test(positions, outcomes, offsets, 8, n_shuffles=100, units=units, n_resamples=0)
        rejected += shared.moves_with_grid
        below_alpha += shared.p_value < 0.05
        below_alpha_as_independent += alone.p_value < 0.05
        assert shared.n_distinct_prompts == 60 and shared.n_prompts == 1200
    assert rejected <= 8 and below_alpha <= 10
    assert below_alpha_as_independent >= 90  # copies shuffled apart: p < 0.05 nearly always


def test_the_grid_phase_amplitude_leaves_position_out_and_matches_a_plain_loop():
    """Noise-free expected accuracies: a 30-point effect of position phase and a 20-point drop at grid phase 3.
    Over all offsets the position effect averages out: the grid-phase profile is the drop alone, and the grid
    effect is found beside a larger effect of position phase."""
    positions = np.arange(100, 260)
    offsets = np.arange(4)
    grid_phase = (positions[None, :] - offsets[:, None]) % 4
    outcomes = 0.5 + 0.3 * (positions[None, :] % 4 == 1) - 0.2 * (grid_phase == 3)
    result = grid_shift_test(positions, outcomes, offsets, 4, n_shuffles=20, units=(positions - 100) // 40)
    assert result.profile_points == pytest.approx([5, 5, 5, -15])
    assert result.amplitude_points == pytest.approx(20) and result.moves_with_grid
    assert result.bootstrap == "distinct prompts and units" and result.n_units == 4
    assert result.amplitude_ci == pytest.approx([20, 20])  # every unit holds the same pattern
    by_grid, _ = _reference_profiles(positions, outcomes, offsets, 4)
    plain = by_grid.mean(axis=0)
    assert result.profile_points == pytest.approx((plain - plain.mean()).tolist())
    position = grid_shift_test(
        positions, np.tile(outcomes[0] * 0 + 0.5 + 0.3 * (positions % 4 == 1), (4, 1)), offsets, 4, n_shuffles=20
    )
    assert position.amplitude_points == pytest.approx(0) and not position.moves_with_grid


def _reference_amplitude_interval(positions, outcomes, offsets, period, blocks_list, dfs, confidence=0.95):
    """The grid-phase amplitude's simultaneous bounds (points) written as loops: each prompt's linearised share of
    each phase's mean at each offset, summed per block; per ordered pair the largest variance over the blockings,
    the degrees of freedom of the blocking whose variance is the largest on average."""
    from scipy import stats as scipy_stats

    n_offsets, n = outcomes.shape
    phase = (positions[None, :] - offsets[:, None]) % period
    reach = [sorted({o for o in range(n_offsets) if (phase[o] == g).any()}) for g in range(period)]
    mean = {(o, g): outcomes[o][phase[o] == g].mean() for o in range(n_offsets) for g in range(period) if o in reach[g]}
    profile = np.array([np.mean([mean[o, g] for o in reach[g]]) for g in range(period)])
    pairs = [(i, j) for i in range(period) for j in range(period) if i != j]
    variances = []
    for blocks in blocks_list:
        names = np.unique(blocks)
        scores = np.zeros((names.size, period))
        for o in range(n_offsets):
            for c in range(n):
                g = phase[o, c]
                share = (outcomes[o, c] - mean[o, g]) / (phase[o] == g).sum() / len(reach[g])
                scores[np.searchsorted(names, blocks[c]), g] += share
        variances.append([((scores[:, i] - scores[:, j]) ** 2).sum() * names.size / (names.size - 1) for i, j in pairs])
    variances = np.array(variances)
    df = dfs[int(np.argmax(variances.mean(axis=1)))]
    se = np.sqrt(variances.max(axis=0))
    margin = scipy_stats.studentized_range.ppf(1 - (1 - confidence) / 2, period, df) / np.sqrt(2)
    one = scipy_stats.t.ppf(1 - (1 - confidence) / 2, df)
    differences = [profile[i] - profile[j] for i, j in pairs]
    low = max(d - margin * e for d, e in zip(differences, se, strict=True))
    high = max(d + one * e for d, e in zip(differences, se, strict=True))
    return [100 * min(max(low, 0), 1), 100 * min(max(high, 0), 1)]


def test_the_grid_phase_amplitude_interval_matches_a_plain_loop():
    rng = np.random.default_rng(2)
    positions = 100 + rng.integers(0, 48, 120)
    units = rng.integers(0, 5, 120)
    offsets = np.arange(4)
    for hard_unit in (False, True):  # with one unit hard at one grid phase, the units' variance is the larger
        p = 0.6 - 0.2 * ((positions[None, :] - offsets[:, None]) % 4 == 1)
        if hard_unit:
            p = p - 0.5 * ((units[None, :] == 0) & ((positions[None, :] - offsets[:, None]) % 4 == 3))
        outcomes = (rng.random((4, 120)) < np.clip(p, 0, 1)).astype(float)
        result = grid_shift_test(positions, outcomes, offsets, 4, n_shuffles=10, units=units)
        expected = _reference_amplitude_interval(
            positions, outcomes, offsets, 4, [np.arange(120), units], [np.inf, 4.0]
        )
        assert result.amplitude_ci == pytest.approx(expected, abs=1e-9)
    alone = grid_shift_test(positions, outcomes, offsets, 4, n_shuffles=10)
    assert alone.amplitude_ci == pytest.approx(
        _reference_amplitude_interval(positions, outcomes, offsets, 4, [np.arange(120)], [np.inf]), abs=1e-9
    )


def test_the_amplitude_interval_resamples_units_and_covers_a_sampled_drop():
    rng = np.random.default_rng(4)
    offsets = np.arange(4)
    covered = 0
    for _ in range(20):
        positions, units, ids = _copies(rng, 400, 3, 10)
        p = 0.7 - 0.3 * ((positions[None, :] - offsets[:, None]) % 4 == 2)  # a 30-point drop at grid phase 2
        distinct = rng.random((4, 400)) < p[:, ::3]
        result = grid_shift_test(positions, distinct[:, ids], offsets, 4, n_shuffles=50, units=units, prompt_ids=ids)
        low, high = result.amplitude_ci
        covered += low <= 30 <= high
        assert result.moves_with_grid and low >= 5
    assert covered >= 16
    one_unit = grid_shift_test(
        positions, distinct[:, ids], offsets, 4, n_shuffles=10, units=np.zeros_like(units), prompt_ids=ids
    )
    assert one_unit.bootstrap == "distinct prompts" and one_unit.amplitude_ci is not None
    with pytest.raises(ValueError, match=r"^prompt_ids must have one entry per prompt \(1200\), got shape \(3,\)$"):
        grid_shift_test(positions, distinct[:, ids], offsets, 4, prompt_ids=[0, 1, 2])
    with pytest.raises(ValueError, match="identical by prompt_ids sit at different target positions"):
        grid_shift_test(positions, distinct[:, ids], offsets, 4, prompt_ids=np.zeros_like(ids))


def _shifted(moves, low, high, p_value=0.001, periodic=True):
    positions = np.arange(100, 140)
    base = grid_shift_test(positions, np.ones((4, 40)), np.arange(4), 4, n_shuffles=5)
    return replace(
        base,
        moves_with_grid=moves,
        p_value=p_value,
        amplitude_points=(low + high) / 2,
        amplitude_ci=[low, high],
        periodic=periodic,
        periodic_p_value=0.001 if periodic else 0.4,
    )


def _position_verdict(accuracy, drop):
    rng = np.random.default_rng(0)
    units = np.repeat(np.arange(8), 200)
    positions = np.tile(np.arange(100, 300), 8)
    outcomes = rng.random(1600) < accuracy - drop * (positions % 4 == 1)
    return phase_verdict(units, positions, outcomes, 4, n_resamples=200, chance=0.25)


def test_a_moved_grid_decides_the_verdict_by_one_rule():
    strong = _position_verdict(0.9, 0.5)
    assert strong.verdict == "phase-sensitive"
    stays_put = rest_on_grid_shift(strong, _shifted(False, 0.0, 3.0, p_value=0.9))
    assert (
        stays_put.verdict == "inconclusive: the design's power was not computed"
        and "an effect of position, not of the grid" in stays_put.note
    )
    assert stays_put.position_design["verdict"] == "phase-sensitive" and stays_put.p_value == 0.9
    assert stays_put.effect_ci == [0.0, 3.0] and stays_put.basis.startswith("grid shift (the pattern does not move")
    flat = _position_verdict(0.8, 0.0)
    assert rest_on_grid_shift(flat, _shifted(True, 12.0, 20.0)).verdict == "phase-sensitive"
    small = rest_on_grid_shift(flat, _shifted(True, 1.0, 4.0))
    assert small.verdict == "phase effect below 5 points" and small.note == ""
    unresolved = rest_on_grid_shift(flat, _shifted(True, 2.0, 9.0))
    assert unresolved.verdict == "phase effect below 5 points" and "not resolved" in unresolved.note
    assert (
        rest_on_grid_shift(_position_verdict(0.26, 0.0), _shifted(True, 12.0, 20.0)).verdict == "not judged: at chance"
    )
    unpowered = _shifted(False, 12.0, 20.0, p_value=0.2)
    assert rest_on_grid_shift(flat, unpowered).verdict == "inconclusive: the design's power was not computed"
    for points, label in [
        (12.0, "no phase effect detected"),
        (31.2, "inconclusive: could miss a weak phase of up to 31.2 points"),
        (None, "inconclusive: could miss a weak phase of any size"),
    ]:
        assert rest_on_grid_shift(flat, replace(unpowered, mde={"points": points})).verdict == label
    assert rest_on_grid_shift(flat, _shifted(True, 12.0, 20.0)).to_dict()["grid_shift"]["moves_with_grid"]
    aperiodic = rest_on_grid_shift(flat, _shifted(True, 12.0, 20.0, periodic=False))
    assert aperiodic.verdict == "depends on the grid, not periodic" and "does not repeat every 4" in aperiodic.note


def _grid_run(rng, positions, ids, drop_points, weak, offsets, accuracy=0.7, noise=0.05):
    """Outcomes [O, N] of a deterministic model: each distinct prompt right or wrong at every offset (`noise` of
    its answers change with the offset at random), and at grid phase `weak` a right answer lost with the
    probability that takes `drop_points` off that phase's accuracy."""
    n_distinct = ids.max() + 1
    right = np.tile(rng.random(n_distinct) < accuracy, (offsets.size, 1))
    right ^= rng.random(right.shape) < noise
    at_weak = (positions[None, :] - offsets[:, None]) % 4 == weak
    lose = rng.random(right.shape) < drop_points / 100 / right[:, ids][at_weak].mean()
    return (right[:, ids] & ~(at_weak & lose[:, ids])).astype(float)


def test_the_grid_shift_mde_is_the_drop_found_with_80_percent_power_and_copies_do_not_lower_it():
    """The MDE simulated on one run's own outcomes is the drop at one grid phase that fresh runs of the same
    design find (the whole rule: moves with the grid, amplitude's lower bound at least 5 points) about 80% of
    the time; a smaller drop is found less often. Copies of a prompt are one observation: a design that repeats
    every prompt three times has the MDE of the one that does not."""
    rng = np.random.default_rng(21)
    offsets = np.arange(4)
    positions, units, ids = _copies(rng, 300, 1, 10)
    run = _grid_run(rng, positions, ids, 0.0, 0, offsets)
    design = GridShiftDesign(positions, offsets, 4, units, ids)
    mde = grid_shift_mde(design, design.pool(run), 0.05, 5.0, n_simulations=100, seed=1)
    assert mde["points"] is not None and 5 <= mde["points"] <= 40
    assert "grid phase" in mde["what"] and mde["distinct_prompts"] == 300

    def found(drop_points, n=60):
        hits = 0
        for _ in range(n):
            outcomes = _grid_run(rng, positions, ids, drop_points, rng.integers(4), offsets)
            test = grid_shift_test(
                positions,
                outcomes,
                offsets,
                4,
                seed=int(rng.integers(1 << 30)),
                n_shuffles=200,
                units=units,
                prompt_ids=ids,
                n_resamples=200,
            )
            hits += test.moves_with_grid and test.amplitude_ci[0] >= 5
        return hits / n

    assert found(mde["points"]) >= 0.6
    assert found(0.75 * mde["points"]) < 0.6
    copies = np.repeat(np.arange(300), 3)
    tripled = GridShiftDesign(positions[copies], offsets, 4, units[copies], ids[copies])
    assert tripled.n_distinct == 300 and tripled.weights.tolist() == [3.0] * 300
    assert grid_shift_mde(tripled, tripled.pool(run[:, copies]), 0.05, 5.0, n_simulations=100, seed=1) == mde


def test_the_grid_shift_mde_counts_only_runs_the_chance_rule_judges():
    """A simulated grid-shift run whose mean accuracy's interval reaches chance is not judged, as in the verdict:
    with a chance level above what the model answers, no drop is detectable; the mean's interval is the percentile
    bootstrap over units of the first offset's accuracy, identical prompts counted once (a loop reference)."""
    rng = np.random.default_rng(22)
    offsets = np.arange(4)
    positions, units, ids = _copies(rng, 300, 1, 10)
    run = _grid_run(rng, positions, ids, 0.0, 0, offsets, accuracy=0.3)
    design = GridShiftDesign(positions, offsets, 4, units, ids)
    assert grid_shift_mde(design, design.pool(run), 0.05, 5.0, n_simulations=60, seed=1)["points"] is not None
    unjudged = grid_shift_mde(design, design.pool(run), 0.05, 5.0, n_simulations=60, seed=1, chance=0.5)
    assert unjudged["points"] is None and unjudged["chance"] == 0.5
    copies = np.repeat(np.arange(300), 2)
    doubled = GridShiftDesign(positions[copies], offsets, 4, units[copies], ids[copies])
    cells = doubled.pool(run[:, copies])
    draws = np.random.default_rng(3).integers(0, doubled.n_units, size=(400, doubled.n_units))
    per_unit = [(cells[0][doubled.unit_index == u].sum(), (doubled.unit_index == u).sum()) for u in range(10)]
    means = [sum(per_unit[u][0] for u in row) / sum(per_unit[u][1] for u in row) for row in draws]
    assert doubled.mean_interval(cells, 400, 3, 0.95) == pytest.approx(np.quantile(means, [0.025, 0.975]).tolist())
    assert doubled.mean_interval(cells, 400, 3, 0.95) == design.mean_interval(design.pool(run), 400, 3, 0.95)


def test_a_verdict_resting_on_the_grid_shift_states_that_tests_mde_and_keeps_the_position_designs():
    flat = replace(
        _position_verdict(0.8, 0.0),
        verdict="no phase effect detected",
        mde={"points": 12.5, "power": 0.8, "simulations": 200, "distinct_prompts": 1600, "what": "drop at one phase"},
    )
    grid_mde = {
        "points": 7.4,
        "power": 0.8,
        "simulations": 200,
        "distinct_prompts": 40,
        "what": "drop at one grid phase (drawn per simulated run) that the grid-shift verdict calls ...",
    }
    verdict = rest_on_grid_shift(flat, replace(_shifted(False, 0.0, 3.0, p_value=0.6), mde=grid_mde))
    assert verdict.mde == grid_mde and verdict.position_design["mde"] == flat.mde
    cell = verdict_cell(verdict.to_dict())
    assert "grid shift p 0.6, P=4; MDE 7.4; position design: no phase effect detected" in cell
    assert cell.endswith("MDE 12.5)")
    text = format_verdict(verdict.to_dict())
    assert "grid shift: minimum detectable effect 7.4 points (a drop at one grid phase found" in text
    assert "position design: minimum detectable effect 12.5 points (a drop at one phase found" in text
    # written before the grid shift had an MDE: the verdict's MDE was the position design's, and is shown as such
    old = verdict.to_dict()
    old["mde"], old["position_design"] = flat.mde, {k: v for k, v in old["position_design"].items() if k != "mde"}
    assert "P=4; position design:" in verdict_cell(old) and verdict_cell(old).endswith("MDE 12.5)")
    assert "grid shift: minimum detectable effect: not computed" in format_verdict(old)


def test_a_results_grid_shift_is_recomputed_from_its_records_alone(tmp_path, capsys):
    """The per-prompt records hold what the test needs: recomputed from them, the test and its MDE are the run's;
    a file written before prompt_id was recorded gets the prefix protocol's identical prompts from the unit and
    the target and query positions."""
    result = run_lookup(GridScorer(), OPTIONS, n_resamples=1000, progress=False, grid_shift=True)
    stored = result["phase_test"]["grid_shift"]
    assert grid_shift_of_result(result).to_dict() == stored
    older = {**result, "prompt_records": {**result["prompt_records"]}}
    older["prompt_records"]["columns"] = {
        k: v for k, v in result["prompt_records"]["columns"].items() if k != "prompt_id"
    }
    assert result["protocol"] == "prefix" and grid_shift_of_result(older).to_dict() == stored
    path = tmp_path / "lookup.json"
    path.write_text(json.dumps(result))
    main([str(path)])
    assert f"{stored['n_distinct_prompts']} distinct of {stored['n_prompts']} prompts" in capsys.readouterr().out
    unshifted = run_lookup(GridScorer(), OPTIONS, n_resamples=100, progress=False)
    with pytest.raises(ValueError, match=r"run without the grid shift \(grid_shift, --grid-shift\)"):
        grid_shift_of_result(unshifted)


def test_a_result_judged_again_from_its_records_is_the_run_itself_until_the_statistics_change(tmp_path, capsys):
    """`rejudge` recomputes the summary, the verdict with its MDE and the grid-shift test from the per-prompt
    records: on the run's own statistics it returns the run's numbers, with or without the grid shift; a verdict
    written by older statistics is replaced by the current one; nothing but lookup and needle records is taken."""
    from phasekv.studies.probe.rejudge import main as rejudge_main
    from phasekv.studies.probe.rejudge import rejudge

    for grid in (True, False):
        result = run_lookup(GridScorer(), OPTIONS, n_resamples=300, progress=False, grid_shift=grid)
        again = rejudge(json.loads(json.dumps(result)))
        for field in ("summary", "phase_test", "cell_accuracy"):
            assert again[field] == json.loads(json.dumps(result[field])), field
        assert "nothing was scored" in again["rejudged"]["what"]
    stale = json.loads(json.dumps(result))
    stale["phase_test"] = {**stale["phase_test"], "verdict": "phase-sensitive", "mde": {"points": 1.0}}
    stale["summary"] = {**stale["summary"], "gap_points": -1.0}
    assert rejudge(stale)["phase_test"] == json.loads(json.dumps(result["phase_test"]))
    assert rejudge(stale)["summary"]["gap_points"] == result["summary"]["gap_points"]
    path = tmp_path / "stale.json"
    path.write_text(json.dumps(stale))
    rejudge_main([str(path)])
    assert json.loads(path.read_text()) == stale  # the input is never rewritten
    written = tmp_path / "stale.rejudged.json"
    assert json.loads(written.read_text())["phase_test"]["verdict"] == result["phase_test"]["verdict"]
    assert "phase verdict at period" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="would overwrite this command's input"):
        rejudge_main([str(path), str(tmp_path / "." / "stale.json")])
    assert json.loads(path.read_text()) == stale
    with pytest.raises(ValueError, match="only the result of a residue probe"):
        rejudge({**stale, "probe": "flip"})


def test_a_grid_effect_without_a_period_is_not_a_weak_phase():
    """A cliff that moves with the grid (accuracy 90% before grid coordinate t - o = 149, 20% after) is a grid
    effect, and its grid-phase profile is not flat, but it does not repeat: the grid shift finds that it moves,
    the phase test along the grid coordinate finds no period, and the verdict is not "phase-sensitive"; a drop at
    one grid phase of the same design is periodic and is."""
    rng = np.random.default_rng(3)
    positions, units, ids = _copies(rng, 400, 2, 8)
    positions = 100 + (positions - 100) // 2  # 64 positions, the presses design's span
    offsets = np.arange(8)
    coordinate = positions[None, :] - offsets[:, None]
    ease = rng.random(400).repeat(2)[None, :]  # a deterministic model: each prompt right where it is easy enough
    cliff = ease < np.where(coordinate < 149, 0.9, 0.2)
    test = grid_shift_test(positions, cliff, offsets, 8, n_shuffles=200, units=units, prompt_ids=ids)
    assert test.moves_with_grid and test.periodic is False and test.periodic_p_value >= 0.05
    flat = _position_verdict(0.8, 0.0)
    assert rest_on_grid_shift(flat, test).verdict == "depends on the grid, not periodic"
    weak = ease < np.where(coordinate % 8 == 3, 0.5, 0.8)
    periodic = grid_shift_test(positions, weak, offsets, 8, n_shuffles=200, units=units, prompt_ids=ids)
    assert periodic.moves_with_grid and periodic.periodic and periodic.periodic_p_value < 0.05
    assert rest_on_grid_shift(flat, periodic).verdict == "phase-sensitive"
