"""Tests for phasekv.stats: intervals against scipy, bootstrap coverage, uniformity tests."""

import json

import numpy as np
import pytest
from scipy.stats import binomtest, chi2_contingency

from phasekv.stats import (
    bootstrap_mappings,
    chi_square_uniformity,
    fold_by_stride,
    format_summary,
    period_difference,
    permutation_uniformity,
    resample_accuracy,
    residue_accuracy,
    spread_stats,
    summarize_mappings,
    summarize_prompts,
    wilson_interval,
)


def mapping_matrix(rng, n_mappings, per_residue):
    """Simulated [n_mappings, M] correctness: mapping i at residue r is correct with
    probability q_i * c_r, q_i ~ Beta(2, 2), so the true accuracy is 0.5 * c_r."""
    q = rng.beta(2.0, 2.0, size=(n_mappings, 1))
    return rng.random((n_mappings, len(per_residue))) < q * np.asarray(per_residue)


# ---------------------------------------------------------------- Wilson intervals


@pytest.mark.parametrize("confidence", [0.95, 0.9])
def test_wilson_matches_scipy(confidence):
    sizes = (1, 2, 3, 7, 20, 64, 256, 1000)
    pairs = [(k, n) for n in sizes for k in sorted({0, 1, n // 3, n // 2, n - 1, n})]
    k, n = np.array(pairs).T
    low, high = wilson_interval(k, n, confidence)
    for i, (ki, ni) in enumerate(pairs):
        ref = binomtest(int(ki), int(ni)).proportion_ci(confidence_level=confidence, method="wilson")
        assert low[i] == pytest.approx(ref.low, abs=1e-12), (ki, ni)
        assert high[i] == pytest.approx(ref.high, abs=1e-12), (ki, ni)
    assert low[k == 0].max() == 0.0 and high[k == n].min() == 1.0


@pytest.mark.parametrize(
    "k, n, match",
    [(1, 0, "trials must be >= 1"), (5, 4, "0 <= successes"), (-1, 4, "0 <= successes"), (1.5, 4, "whole")],
)
def test_wilson_rejects_bad_counts(k, n, match):
    with pytest.raises(ValueError, match=match):
        wilson_interval(k, n)


# ---------------------------------------------------------------- residue grouping


def test_residue_accuracy_counts_and_bounds():
    correct = [1, 0, 1, 1, 0, 0, 1]
    residues = [0, 0, 1, 1, 2, 2, 2]
    groups = residue_accuracy(correct, residues, modulus=3)
    assert groups.modulus == 3
    np.testing.assert_array_equal(groups.counts, [2, 2, 3])
    np.testing.assert_array_equal(groups.successes, [1, 2, 1])
    np.testing.assert_allclose(groups.accuracy, [0.5, 1.0, 1 / 3])
    low, high = wilson_interval([1, 2, 1], [2, 2, 3])
    np.testing.assert_allclose(groups.ci_low, low)
    np.testing.assert_allclose(groups.ci_high, high)
    assert groups.successes.dtype.kind == "i" and groups.confidence == 0.95  # whole counts; the record's level
    narrow = residue_accuracy(correct, residues, modulus=3, confidence=0.8)
    assert narrow.confidence == 0.8
    np.testing.assert_allclose(narrow.ci_low, wilson_interval([1, 2, 1], [2, 2, 3], 0.8)[0])


@pytest.mark.parametrize(
    "correct, residues, modulus, match",
    [
        ([1, 0, 1], [0, 1], 2, "3 prompts but residues has 2"),
        ([1, 0, 1], [0, 1, 2], 2, r"residues must lie in \[0, 2\); found 2"),
        ([1, 0, 1], [0, -1, 1], 2, "found -1"),
        ([1, 0, 1], [0, 0, 2], 4, r"no prompts: \[1, 3\]"),
        ([1, 2, 1], [0, 1, 0], 2, "only 0/1"),
        ([1, np.nan, 1], [0, 1, 0], 2, "only 0/1"),
        ([], [], 2, "empty"),
    ],
)
def test_residue_accuracy_rejects_bad_input(correct, residues, modulus, match):
    with pytest.raises(ValueError, match=match):
        residue_accuracy(correct, residues, modulus)


# ---------------------------------------------------------------- spread, period, fold


def test_period_difference_and_fold_by_hand():
    acc = np.array([1.0, 0.5, 0.5, 0.0, 0.9, 0.5, 0.6, 0.0])
    # pairs (0,4), (1,5), (2,6), (3,7): |0.1|, 0, |0.1|, 0 -> mean 0.05 = 5 points
    assert period_difference(acc, 4) == pytest.approx(5.0)
    counts = np.full(8, 10)
    fold = fold_by_stride(acc * counts, counts, 4)
    np.testing.assert_array_equal(fold.n_residues, [2, 2, 2, 2])
    np.testing.assert_array_equal(fold.counts, [20, 20, 20, 20])
    np.testing.assert_array_equal(fold.successes, [19, 10, 11, 0])
    np.testing.assert_allclose(fold.accuracy, [0.95, 0.5, 0.55, 0.0])


def test_period_and_fold_when_stride_does_not_divide_modulus():
    acc = np.array([0.2, 0.4, 0.6, 0.8, 0.3, 0.1])
    # only r = 0, 1 have r + 4 < 6: (|0.2 - 0.3| + |0.4 - 0.1|) / 2 = 0.2
    assert period_difference(acc, 4) == pytest.approx(20.0)
    fold = fold_by_stride([2, 4, 6, 8, 3, 1], [10, 10, 10, 10, 10, 10], 4)
    np.testing.assert_array_equal(fold.n_residues, [2, 2, 1, 1])
    np.testing.assert_allclose(fold.accuracy, [0.25, 0.25, 0.6, 0.8])
    for successes, counts in (([[1, 2], [3, 4]], [[5, 5], [5, 5]]), ([1, 2, 3], [5, 5])):
        with pytest.raises(ValueError, match="1-dimensional of equal length"):
            fold_by_stride(successes, counts, 1)


def test_period_difference_is_vectorised_and_checks_stride():
    acc = np.random.default_rng(0).random((5, 8))
    np.testing.assert_allclose(period_difference(acc, 2), [period_difference(row, 2) for row in acc])
    for bad in (0, 8, 9, 2.5):
        with pytest.raises(ValueError, match="stride"):
            period_difference(acc, bad)


def test_spread_stats():
    out = spread_stats([0.25, 0.75, 0.5])
    assert out["mean"] == pytest.approx(0.5)
    assert out["worst"] == 0.25 and out["best"] == 0.75
    assert out["gap_points"] == pytest.approx(50.0)
    assert spread_stats([True, False, True])["gap_points"] == 100.0  # 0/1 outcomes as booleans
    rows = spread_stats([[0.0, 1.0], [0.5, 0.5]])  # over the last axis
    assert rows["gap_points"].tolist() == [100.0, 0.0] and rows["mean"].tolist() == [0.5, 0.5]
    assert spread_stats([0.5])["gap_points"] == 0.0  # one residue: nothing to compare, but defined
    for bad in (0.5, [], [[]]):
        with pytest.raises(ValueError, match="accuracy needs a non-empty last .residue. axis"):
            spread_stats(bad)


# ---------------------------------------------------------------- bootstrap over mappings


def test_resample_accuracy_has_the_binomial_spread():
    rng = np.random.default_rng(3)
    x = rng.random((400, 3)) < [0.1, 0.5, 0.9]
    draws = resample_accuracy(x, 4000, np.random.default_rng(4))
    phat = x.mean(axis=0)
    np.testing.assert_allclose(draws.mean(axis=0), phat, atol=0.003)
    np.testing.assert_allclose(draws.std(axis=0), np.sqrt(phat * (1 - phat) / 400), rtol=0.06)


def test_resample_accuracy_in_chunks_is_one_draw_of_every_resample():
    x = np.random.default_rng(5).random((1000, 2)) < [0.3, 0.7]
    draws = resample_accuracy(x, 2500, np.random.default_rng(6))  # 2,500 x 1,000 weights: two chunks
    rows = np.random.default_rng(6).integers(0, 1000, size=(2500, 1000))  # every mapping, the first included
    assert draws == pytest.approx(x[rows].mean(axis=1), abs=1e-12)


def test_bootstrap_intervals_cover_the_truth():
    c = np.array([0.9, 0.5, 0.8, 0.3, 0.95, 0.6])
    truth = 0.5 * c
    rng = np.random.default_rng(2024)
    covered, covered_mean = [], []
    for seed in range(200):
        x = mapping_matrix(rng, 100, c)
        boot = bootstrap_mappings(x, n_resamples=1000, seed=seed)
        covered.append((boot.accuracy_low <= truth) & (truth <= boot.accuracy_high))
        low, high = boot.stats["mean"]
        covered_mean.append(low <= truth.mean() <= high)
    rate = np.mean(covered)
    assert 0.90 <= rate <= 0.99, rate
    assert 0.90 <= np.mean(covered_mean) <= 0.99, np.mean(covered_mean)


def test_bootstrap_is_reproducible_with_a_seed():
    x = mapping_matrix(np.random.default_rng(0), 50, [0.9, 0.4, 0.7, 0.2])
    a = bootstrap_mappings(x, stride=2, n_resamples=300, seed=7)
    b = bootstrap_mappings(x, stride=2, n_resamples=300, seed=7)
    c = bootstrap_mappings(x, stride=2, n_resamples=300, seed=8)
    np.testing.assert_array_equal(a.accuracy_low, b.accuracy_low)
    assert a.stats == b.stats
    assert a.stats != c.stats
    assert set(a.stats) == {"mean", "worst", "best", "gap_points", "period_difference_points"}
    first, again = (summarize_mappings(x, 2, 300, 300, seed=5).to_dict() for _ in range(2))
    assert first == again


def test_bootstrap_rejects_bad_input():
    with pytest.raises(ValueError) as one_mapping:
        bootstrap_mappings(np.ones((1, 4)))
    assert str(one_mapping.value) == "the bootstrap needs at least 2 mappings, got 1"
    with pytest.raises(ValueError, match="2-dimensional"):
        bootstrap_mappings(np.ones(4))
    with pytest.raises(ValueError, match="stride"):
        bootstrap_mappings(np.ones((3, 4)), stride=4)
    with pytest.raises(ValueError, match="n_resamples"):
        bootstrap_mappings(np.ones((3, 4)), n_resamples=0)


def _reference_mapping_bootstrap(x, stride, n_resamples, seed, confidence):
    """(per-residue intervals [2, M], statistic intervals) of the mapping bootstrap written out: the same draws
    of rows, each resample's statistics in a loop, basic intervals clipped by hand for the spread statistics."""
    n, m = x.shape
    draws = np.random.default_rng(seed).integers(0, n, size=(n_resamples, n))
    acc = np.array([x[row].mean(axis=0) for row in draws])  # [R, M]

    def statistics(a):
        out = {"mean": a.mean(), "worst": a.min(), "best": a.max(), "gap_points": 100 * (a.max() - a.min())}
        if stride is not None:
            out["period_difference_points"] = 100 * np.mean([abs(a[r] - a[r + stride]) for r in range(m - stride)])
        return out

    tail = (1 - confidence) / 2
    resampled = [statistics(a) for a in acc]
    intervals = {}
    for name, theta in statistics(x.mean(axis=0)).items():
        low, high = np.quantile([r[name] for r in resampled], [tail, 1 - tail])
        if name != "mean":
            top = 100.0 if name.endswith("_points") else 1.0
            low, high = min(max(2 * theta - high, 0.0), top), min(max(2 * theta - low, 0.0), top)
        intervals[name] = (low, high)
    return np.quantile(acc, [tail, 1 - tail], axis=0), intervals


def _tied_residues(n_mappings=40):
    """[n_mappings, n_mappings] 0/1, each mapping wrong at its own residue only: every residue at the same
    accuracy, so the observed gap is 0 while no resample's is, and a resample's worst residue (its most
    often drawn mapping's) falls so far below the observed one that both ends of the basic interval leave
    [0, 1] and are clipped; so do both ends of the gap's."""
    return 1.0 - np.eye(n_mappings)


def test_mapping_bootstrap_matches_a_loop_over_resamples():
    rng = np.random.default_rng(21)
    for x, stride, confidence in (
        (mapping_matrix(rng, 30, [0.9, 0.4, 0.7, 0.2, 0.8, 0.6]), 2, 0.95),
        (mapping_matrix(rng, 12, [0.95, 0.05, 0.5]), None, 0.8),
        (_tied_residues(), None, 0.95),
    ):
        boot = bootstrap_mappings(x, stride=stride, n_resamples=300, seed=9, confidence=confidence)
        per_residue, intervals = _reference_mapping_bootstrap(x, stride, 300, 9, confidence)
        assert boot.accuracy_low == pytest.approx(per_residue[0], abs=1e-12)
        assert boot.accuracy_high == pytest.approx(per_residue[1], abs=1e-12)
        assert set(boot.stats) == set(intervals)
        for name, interval in intervals.items():
            assert boot.stats[name] == pytest.approx(interval, abs=1e-9), name
    # the tied design does clip: its worst residue's interval sits at 1, its gap's at 0
    assert boot.stats["worst"] == (1.0, 1.0) and boot.stats["gap_points"] == (0.0, 0.0)


def test_mapping_bootstrap_defaults_and_edges():
    x = mapping_matrix(np.random.default_rng(22), 8, [0.9, 0.4, 0.7])
    default = bootstrap_mappings(x)
    assert (default.n_resamples, default.seed, default.confidence) == (2000, 0, 0.95)
    assert default.stats == bootstrap_mappings(x, n_resamples=2000, seed=0).stats
    assert bootstrap_mappings(x, n_resamples=1).n_resamples == 1  # one resample is allowed, if of little use


# ---------------------------------------------------------------- uniformity tests


def prompts_with_gap(rng, acc, per_residue=100):
    residues = np.repeat(np.arange(len(acc)), per_residue)
    correct = rng.random(residues.size) < np.asarray(acc)[residues]
    return correct, residues


def test_chi_square_rejects_a_planted_gap():
    acc = [0.8] * 8
    acc[3] = 0.5
    for seed in range(20):
        correct, residues = prompts_with_gap(np.random.default_rng(seed), acc)
        groups = residue_accuracy(correct, residues, 8)
        assert chi_square_uniformity(groups.successes, groups.counts).p_value < 0.01


def test_chi_square_level_on_uniform_data():
    rejections = 0
    for seed in range(400):
        correct, residues = prompts_with_gap(np.random.default_rng(seed), [0.7] * 8)
        groups = residue_accuracy(correct, residues, 8)
        rejections += chi_square_uniformity(groups.successes, groups.counts).p_value < 0.05
    assert 0.01 <= rejections / 400 <= 0.10, rejections


def test_chi_square_statistic_matches_scipy():
    succ, cnt = np.array([30, 45, 50, 20]), np.array([60, 70, 80, 50])
    test = chi_square_uniformity(succ, cnt)
    ref = chi2_contingency(np.stack([succ, cnt - succ], axis=1), correction=False)
    assert test.statistic == pytest.approx(ref.statistic) and test.p_value == pytest.approx(ref.pvalue)
    assert test.df == 3 and test.note == ""


def test_permutation_rejects_a_planted_gap():
    # mapping difficulty varies (q_i ~ Beta(2, 2), mean 0.5): accuracy 0.2 at residue 3, 0.5 elsewhere
    c = np.where(np.arange(8) == 3, 0.4, 1.0)
    for seed in range(10):
        x = mapping_matrix(np.random.default_rng(seed), 100, c)
        test = permutation_uniformity(x, n_permutations=500, seed=seed)
        assert test.p_value < 0.01, (seed, test)


def test_permutation_level_on_uniform_data():
    rejections = 0
    for seed in range(150):
        x = mapping_matrix(np.random.default_rng(seed), 50, [0.8] * 8)
        rejections += permutation_uniformity(x, n_permutations=200, seed=seed).p_value < 0.05
    assert rejections / 150 <= 0.10, rejections


def test_permutation_statistic_is_pearson_on_column_totals():
    x = mapping_matrix(np.random.default_rng(1), 40, [0.9, 0.3, 0.6, 0.7, 0.5])
    succ = x.sum(axis=0)
    ref = chi2_contingency(np.stack([succ, 40 - succ], axis=1), correction=False)
    test = permutation_uniformity(x, n_permutations=50, seed=0)
    assert test.statistic == pytest.approx(ref.statistic)
    assert test.df is None and test.n_permutations == 50 and test.seed == 0


# ---------------------------------------------------------------- degenerate inputs


@pytest.mark.parametrize("value, word", [(1, "correct"), (0, "wrong")])
def test_all_correct_or_all_wrong(value, word):
    x = np.full((20, 6), value)
    for test in (chi_square_uniformity(x.sum(axis=0), np.full(6, 20)), permutation_uniformity(x)):
        assert test.statistic == 0.0 and test.p_value == 1.0
        assert f"every prompt {word}" in test.note
    summary = summarize_mappings(x, stride=3, n_resamples=100, n_permutations=100)
    assert summary.gap_points == 0.0 and summary.period_difference_points == 0.0
    assert summary.ci_low == summary.ci_high == [float(value)] * 6
    flat = summarize_prompts(x.ravel(), np.tile(np.arange(6), 20), 6, stride=3)
    assert flat.uniformity.p_value == 1.0
    assert "note: every prompt" in format_summary(flat)


def test_mappings_without_internal_variation():
    x = np.zeros((10, 4))
    x[:4] = 1  # some mappings always right, the rest always wrong
    test = permutation_uniformity(x, n_permutations=100)
    assert test.p_value == 1.0 and "no variation within mappings" in test.note


def test_single_residue_cannot_be_tested():
    with pytest.raises(ValueError, match="at least 2 residues"):
        chi_square_uniformity([3], [5])
    with pytest.raises(ValueError, match="at least 2 residues"):
        permutation_uniformity(np.ones((5, 1)))


# ---------------------------------------------------------------- summary and table


def test_summarize_prompts_record():
    acc = [0.9, 0.9, 0.9, 0.4, 0.9, 0.9, 0.9, 0.4]
    correct, residues = prompts_with_gap(np.random.default_rng(0), acc, per_residue=200)
    summary = summarize_prompts(correct, residues, 8, stride=4)
    d = summary.to_dict()
    assert json.loads(json.dumps(d)) == d
    groups = residue_accuracy(correct, residues, 8)
    assert d["accuracy"] == groups.accuracy.tolist()
    assert d["ci_low"] == groups.ci_low.tolist() and d["ci_method"] == "wilson"
    assert d["worst_residue"] in (3, 7) and d["best_residue"] not in (3, 7)
    assert d["gap_points"] == pytest.approx(100 * (max(d["accuracy"]) - min(d["accuracy"])))
    assert d["mean"] == pytest.approx(np.mean(d["accuracy"]))
    assert d["period_difference_points"] == pytest.approx(period_difference(groups.accuracy, 4))
    assert d["fold"]["counts"] == [400] * 4 and d["fold"]["phase"] == [0, 1, 2, 3]
    assert d["uniformity"]["method"] == "chi-square homogeneity" and d["uniformity"]["p_value"] < 1e-6
    assert d["bootstrap_resamples"] is None and d["stat_intervals"] is None


def test_summarize_mappings_record_and_table():
    x = mapping_matrix(np.random.default_rng(5), 64, [0.9, 0.9, 0.2, 0.9] * 2)
    summary = summarize_mappings(x, stride=4, n_resamples=500, n_permutations=500, seed=3)
    d = summary.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["n_mappings"] == 64 and d["counts"] == [64] * 8
    assert d["bootstrap_resamples"] == 500 and d["bootstrap_seed"] == 3
    assert d["uniformity"]["method"] == "permutation within mappings" and d["uniformity"]["seed"] == 3
    assert all(lo <= a <= hi for lo, a, hi in zip(d["ci_low"], d["accuracy"], d["ci_high"], strict=True))
    assert set(d["stat_intervals"]) == {"mean", "worst", "best", "gap_points", "period_difference_points"}
    lo, hi = d["stat_intervals"]["mean"]
    assert lo <= d["mean"] <= hi
    text = format_summary(summary, title="lookup")
    lines = text.splitlines()
    assert lines[0] == "lookup" and "bootstrap percentile over mappings" in lines[1]
    assert len(lines) == 2 + 8 + 6
    assert "(basic bootstrap)" in text and "mean [" in text
    assert lines[-1].startswith("uniformity: permutation within mappings") and "p = " in lines[-1]
    assert any(line.startswith("gap ") and "CI" in line for line in lines)
    assert len({len(line) for line in lines[1:10]}) <= 2  # fixed-width rows
    default = summarize_mappings(x[:8], stride=4).to_dict()  # the defaults a published summary was made with
    assert default["bootstrap_resamples"] == 2000 and default["uniformity"]["n_permutations"] == 2000


def test_summary_rejects_bad_stride():
    with pytest.raises(ValueError, match="stride"):
        summarize_prompts([1, 0], [0, 1], 2, stride=2)
    with pytest.raises(ValueError, match="stride"):
        summarize_mappings(np.ones((3, 4)), stride=0)


# ---------------------------------------------------------------- fractional cells (placements)


def placement_cube(rng, n_mappings, per_residue, placements):
    """[n_mappings, M, P] 0/1: placements of one mapping share its difficulty q_i."""
    q = rng.beta(2.0, 2.0, size=(n_mappings, 1, 1))
    return rng.random((n_mappings, len(per_residue), placements)) < q * np.asarray(per_residue)[:, None]


def test_fractional_cells_are_accepted_and_rejected_outside_unit_interval():
    cells = np.array([[0.0, 1 / 3, 1.0], [2 / 3, 1.0, 0.5]])
    draws = resample_accuracy(cells, 50, np.random.default_rng(0))
    assert draws.shape == (50, 3) and np.all((draws >= 0) & (draws <= 1))
    boot = bootstrap_mappings(cells, n_resamples=50)
    assert boot.stat_methods["mean"] == "percentile" and boot.stat_methods["gap_points"] == "basic"
    for bad in (np.array([[0.5, 1.2], [0.0, 1.0]]), np.array([[0.5, np.nan], [0.0, 1.0]]), -cells):
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            bootstrap_mappings(bad, n_resamples=10)
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            permutation_uniformity(bad, n_permutations=10)
    with pytest.raises(ValueError, match="whole numbers"):
        wilson_interval(0.5, 1)  # Wilson stays on 0/1 counts


def test_summarize_mappings_with_placement_means_counts_prompts():
    cube = placement_cube(np.random.default_rng(11), 40, [0.9, 0.3, 0.9, 0.9], 3)
    cells = cube.mean(axis=2)
    summary = summarize_mappings(cells, stride=2, n_resamples=300, n_permutations=300, trials_per_cell=3)
    d = summary.to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["counts"] == [120] * 4 and d["successes"] == cube.sum(axis=(0, 2)).tolist()
    np.testing.assert_allclose(d["accuracy"], cube.mean(axis=(0, 2)))
    assert d["trials_per_cell"] == 3 and d["n_mappings"] == 40
    assert d["stat_interval_methods"] == {
        "mean": "percentile",
        "worst": "basic",
        "best": "basic",
        "gap_points": "basic",
        "period_difference_points": "basic",
    }
    assert all(isinstance(c, int) for c in d["fold"]["successes"])
    assert d["uniformity"]["p_value"] < 0.01
    assert "prompts" in format_summary(summary).splitlines()[0]
    loose = summarize_mappings(cells, stride=2, n_resamples=300, n_permutations=300).to_dict()
    assert loose["counts"] == [40] * 4 and loose["accuracy"] == d["accuracy"]
    with pytest.raises(ValueError, match="multiples"):
        summarize_mappings(cells, trials_per_cell=2)


def test_permutation_on_fractional_cells_keeps_its_level():
    rng = np.random.default_rng(12)
    rejections = 0
    for seed in range(100):
        cells = placement_cube(rng, 30, [0.7] * 6, 4).mean(axis=2)
        rejections += permutation_uniformity(cells, n_permutations=200, seed=seed).p_value < 0.05
    assert rejections <= 12, rejections


def test_mapping_bootstrap_of_cell_means_covers_with_correlated_placements():
    """Placements of one mapping share its difficulty q_i; resampling whole mappings (their
    per-residue cell means) keeps the nominal coverage."""
    c = np.array([0.9, 0.6, 0.8, 0.4])
    truth = 0.5 * c
    rng = np.random.default_rng(13)
    covered = []
    for seed in range(150):
        cells = placement_cube(rng, 60, c, 4).mean(axis=2)
        boot = bootstrap_mappings(cells, n_resamples=500, seed=seed)
        covered.append((boot.accuracy_low <= truth) & (truth <= boot.accuracy_high))
    assert 0.90 <= np.mean(covered) <= 0.99, np.mean(covered)


def test_basic_interval_covers_a_tied_gap_better_than_percentile():
    """7 of 8 residues tied at 0.8, one at 0.3: true gap 50 points. The observed and resampled
    gaps are biased upward; the basic interval subtracts the bias once and covers more often."""
    p = np.array([0.8] * 7 + [0.3])
    rng = np.random.default_rng(123)
    hits = {"percentile": 0, "basic": 0}
    reps = 300
    for k in range(reps):
        x = rng.random((60, 8)) < p
        for method in hits:
            low, high = bootstrap_mappings(x, n_resamples=400, seed=k, spread_method=method).stats["gap_points"]
            hits[method] += low <= 50.0 <= high
    rates = {m: h / reps for m, h in hits.items()}
    assert abs(rates["basic"] - 0.95) < abs(rates["percentile"] - 0.95), rates
    assert rates["basic"] >= rates["percentile"] + 0.05, rates
    assert rates["basic"] >= 0.8, rates


def test_basic_interval_is_clipped_to_the_valid_range():
    x = np.ones((10, 4))
    x[0, 1] = 0.0
    boot = bootstrap_mappings(x, stride=2, n_resamples=200)
    for name, (low, high) in boot.stats.items():
        top = 1.0 if name in ("mean", "worst", "best") else 100.0
        assert 0.0 <= low <= high <= top, (name, low, high)
    with pytest.raises(ValueError, match="spread_method"):
        bootstrap_mappings(x, spread_method="bca")


def test_summarize_prompts_keeps_its_confidence_design_and_stride_checks():
    correct, residues = [1, 0, 1, 1, 0, 1, 0, 0, 1, 1], [0, 0, 1, 1, 2, 2, 3, 3, 0, 1]
    summary = summarize_prompts(correct, residues, 4, confidence=0.8)
    low, high = wilson_interval(np.array([2, 3, 1, 0]), np.array([3, 3, 2, 2]), 0.8)
    np.testing.assert_allclose(summary.ci_low, low)
    np.testing.assert_allclose(summary.ci_high, high)
    assert summary.design == "independent prompts" and summary.confidence == 0.8 and summary.ci_method == "wilson"
    assert summary.stride is None and summary.fold is None and summary.period_difference_points is None
    with pytest.raises(ValueError, match="stride"):
        summarize_prompts(correct, residues, 4, stride=4)


def test_chi_square_uniformity_refuses_what_it_cannot_test():
    two = chi_square_uniformity([1, 2], [1, 3])  # two residues, one of them with a single prompt: testable
    reference = chi2_contingency([[1, 0], [2, 1]], correction=False)
    assert two.statistic == pytest.approx(reference.statistic) and two.df == 1
    refusals = [
        (([[1, 2]], [[3, 3]]), r"^successes and counts must be 1-dimensional of equal length, got \(1, 2\) and"),
        (([1, 2, 3], [3, 3]), r"^successes and counts must be 1-dimensional of equal length"),
        (([1], [3]), r"^a uniformity test needs at least 2 residues$"),
        (([1, 0, 2], [3, 0, 3]), r"^residue groups with no prompts: \[1\]$"),
        (([1, 4], [3, 3]), r"^successes must satisfy 0 <= successes <= counts$"),
        (([-1, 2], [3, 3]), r"^successes must satisfy 0 <= successes <= counts$"),
    ]
    for (successes, counts), message in refusals:
        with pytest.raises(ValueError, match=message):
            chi_square_uniformity(successes, counts)


def test_residue_labels_are_checked():
    from phasekv.stats.residues import check_residues

    assert check_residues([0, 0, 0], 1, 3).tolist() == [0, 0, 0]  # one residue group is a valid modulus
    assert check_residues(np.array([1.0, 0.0]), 2, 2).tolist() == [1, 0]  # whole floats are labels
    assert check_residues([1, 0], 2.0, 2).dtype == np.int64
    refusals = [
        (([0], 0, 1), r"^modulus must be a positive integer, got 0$"),
        (([0], 1.5, 1), r"^modulus must be a positive integer, got 1\.5$"),
        (([[0]], 2, 1), r"^residues must be 1-dimensional, got shape \(1, 1\)$"),
        (([0, 1], 2, 3), r"^correct has 3 prompts but residues has 2 labels$"),
        (([0.5, 1.0], 2, 2), r"^residues must be integers, got dtype float64$"),
        ((["a", "b"], 2, 2), r"^residues must be integers, got dtype <U1$"),
        (([0, 2, 3], 2, 3), r"^residues must lie in \[0, 2\); found 2 \(2 labels outside\)$"),
        (([-1, 0], 2, 2), r"^residues must lie in \[0, 2\); found -1 \(1 labels outside\)$"),
    ]
    for args, message in refusals:
        with pytest.raises(ValueError, match=message):
            check_residues(*args)


# ---------------------------------------------------------------- input checks and edges, word for word


def test_wilson_names_the_bad_count_and_refuses_non_numbers():
    with pytest.raises(ValueError, match=r"^successes must be whole numbers, got array\(1\.5\)$"):
        wilson_interval(1.5, 4)
    with pytest.raises(ValueError, match=r"^trials must be whole numbers, got array\(\[4\. , 4\.5\]\)$"):
        wilson_interval(1, [4.0, 4.5])
    with pytest.raises(ValueError, match=r"^successes must be whole numbers, got array\(\['a'\]"):
        wilson_interval(["a"], [2])
    with pytest.raises(
        ValueError, match=r"^trials must be >= 1 for every interval \(an empty group has no interval\)$"
    ):
        wilson_interval([0, 0], [3, 0])
    for k in (-1, 5):
        with pytest.raises(ValueError, match=r"^successes must satisfy 0 <= successes <= trials$"):
            wilson_interval(k, 4)
    low, high = wilson_interval([1, 4], 4)  # broadcast; whole floats and ints alike
    assert low.dtype == high.dtype == np.float64 and low.shape == (2,) and high[1] == 1.0
    with pytest.raises(ValueError, match="confidence"):
        wilson_interval(1, 4, confidence=1.0)


def test_correctness_and_fraction_checks_word_for_word():
    from phasekv.stats._checks import as_correctness, as_fractions

    assert as_correctness([True, False], 1).tolist() == [1.0, 0.0]
    assert as_correctness(np.array([[0, 1]]), 2).dtype == np.float64
    binary = r"only 0/1 \(or booleans\)"
    fractions = r"values in \[0, 1\] \(0/1, booleans or fractions\)"
    refusals = [
        (lambda: as_correctness([0, 1], 2), r"^correct must be 2-dimensional, got shape \(2,\)$"),
        (lambda: as_correctness([], 1, "cells"), r"^cells is empty$"),
        (lambda: as_correctness(["a"], 1), r"^correct must be boolean or 0/1 numbers, got dtype <U1$"),
        (lambda: as_correctness([0, 2, 3], 1), rf"^correct must hold {binary}; found np\.float64\(2\.0\)$"),
        (lambda: as_correctness([np.nan], 1, "y"), rf"^y must hold {binary}; found np\.float64\(nan\)$"),
        (lambda: as_fractions([0.5, 1.5], 1), rf"^correct must hold {fractions}; found np\.float64\(1\.5\)$"),
        (lambda: as_fractions([-0.5], 1, "cells"), rf"^cells must hold {fractions}; found np\.float64\(-0\.5\)$"),
        (lambda: as_fractions(["a"], 1), r"^correct must be booleans or numbers in \[0, 1\], got dtype <U1$"),
    ]  # fmt: skip
    for call, message in refusals:
        with pytest.raises(ValueError, match=message):
            call()
    assert as_fractions([0.0, 0.25, 1.0], 1).tolist() == [0.0, 0.25, 1.0]  # both ends of [0, 1] are in


def test_shared_checks_at_their_edges():
    from phasekv.stats._checks import check_confidence, check_stride, make_rng, whole_or_float

    assert whole_or_float([2.0, 3 + 1e-10, 1e-9]) == [2, 3, 0] and isinstance(whole_or_float([2.0])[0], int)
    assert whole_or_float([2.0, 2.5]) == [2.0, 2.5] and whole_or_float([1 + 1e-8]) == [1 + 1e-8]
    assert whole_or_float([[1.0], [2.0]]) == [1, 2]
    assert check_stride(1, 8) == 1 and check_stride(7.0, 8) == 7 and isinstance(check_stride(7.0, 8), int)
    for stride in (0, 8, 1.5):
        with pytest.raises(
            ValueError, match=rf"^stride must be an integer with 1 <= stride < modulus \(8\), got {stride!r}$"
        ):
            check_stride(stride, 8)
    assert check_confidence(0.5) == 0.5 and isinstance(check_confidence(np.float32(0.5)), float)
    for confidence in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match=rf"^confidence must lie strictly between 0 and 1, got {confidence!r}$"):
            check_confidence(confidence)
    generator = np.random.default_rng(3)
    assert make_rng(generator) is generator
    assert make_rng(5).random() == np.random.default_rng(5).random()


def test_chi_square_notes_its_small_tables_and_its_degenerate_ones_exactly():
    from phasekv.stats.uniformity import CHI_SQUARE

    approximate = "some expected cell counts are below 5: the chi-square p-value is approximate"
    at_five = chi_square_uniformity([5, 5], [10, 10])  # every expected count exactly 5: not flagged
    assert at_five.note == "" and at_five.method == CHI_SQUARE and at_five.df == 1
    assert chi_square_uniformity([5, 6], [11, 11]).note == ""  # expected 5.5
    below = chi_square_uniformity([4, 5], [10, 9])  # expected successes 4.74
    reference = chi2_contingency([[4, 6], [5, 4]], correction=False)
    assert below.note == approximate and below.statistic == pytest.approx(reference.statistic)
    assert below.p_value == pytest.approx(reference.pvalue) and below.df == 1
    for successes, word in (([0, 0, 0], "wrong"), ([3, 3, 3], "correct")):
        flat = chi_square_uniformity(successes, [3, 3, 3])
        assert (flat.method, flat.statistic, flat.p_value, flat.df) == (CHI_SQUARE, 0.0, 1.0, 2)
        assert flat.note == f"every prompt {word}: no variation to test, p = 1"


def test_permutation_test_records_its_draws_and_refuses_bad_counts(monkeypatch):
    import phasekv.stats.uniformity as uniformity

    rng = np.random.default_rng(11)
    x = (rng.random((30, 4)) < np.array([0.3, 0.5, 0.6, 0.8])).astype(float)
    whole = permutation_uniformity(x, n_permutations=40, seed=3)
    assert (whole.method, whole.n_permutations, whole.seed, whole.df, whole.note) == (
        uniformity.PERMUTATION, 40, 3, None, ""
    )  # fmt: skip
    assert whole.p_value * 41 == pytest.approx(round(whole.p_value * 41))
    monkeypatch.setattr(uniformity, "_CHUNK_ELEMENTS", 3 * x.size)  # three permutations per chunk
    assert permutation_uniformity(x, n_permutations=40, seed=3) == whole  # chunks draw the same permutations
    monkeypatch.undo()
    assert permutation_uniformity(x, n_permutations=40, seed=np.random.default_rng(3)).seed is None
    # one varying mapping at two residues: every permutation gives the observed statistic, so p = 1 exactly
    tie = permutation_uniformity(np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]]), n_permutations=20)
    assert tie.p_value == 1.0 and tie.note == "" and tie.statistic > 0
    for bad in (0, 1.5):
        with pytest.raises(ValueError, match=rf"^n_permutations must be a positive integer, got {bad!r}$"):
            permutation_uniformity(x, n_permutations=bad)
    assert permutation_uniformity(x, n_permutations=1, seed=0).n_permutations == 1
    same = permutation_uniformity(np.ones((4, 3)) * [[1.0], [0.0], [1.0], [0.0]], n_permutations=9, seed=2)
    assert same.note == "every mapping has the same accuracy at every residue: no variation within mappings, p = 1"
    assert (same.p_value, same.n_permutations, same.seed) == (1.0, 9, 2)


def test_period_difference_and_fold_edges():
    # booleans are read as proportions (True - False would not subtract as booleans)
    assert period_difference([True, False, True, False], 2) == 0.0
    assert period_difference([True, False, False, False], 2) == 50.0
    with pytest.raises(ValueError, match=r"^accuracy needs a residue axis$"):
        period_difference(0.5, 1)
    one_each = fold_by_stride([1, 0, 0, 0], [1, 1, 0, 0], 2)  # one prompt per phase is enough
    assert one_each.counts.tolist() == [1, 1] and one_each.accuracy.tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match=r"^every phase needs at least one prompt to fold$"):
        fold_by_stride([0, 0, 0, 0], [1, 0, 1, 0], 2)


def test_permutation_test_defaults_sparse_tables_and_exact_messages():
    x = np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    default = permutation_uniformity(x)  # the defaults a published test was made with
    assert (default.n_permutations, default.seed) == (2000, 0)
    # column totals [1, 1, 0, 0] of 3 mappings: a mean total below one is not degenerate.
    # By hand: sum (c - 0.5)^2 = 1, times 3 / (0.5 * 2.5) = 2.4
    assert default.statistic == pytest.approx(2.4)
    reference = chi2_contingency([[1, 2], [1, 2], [0, 3], [0, 3]], correction=False)
    assert default.statistic == pytest.approx(reference.statistic)
    assert default.p_value == 1.0  # two single hits in one column or two: never less extreme than observed
    with pytest.raises(ValueError, match=r"^a uniformity test needs at least 2 residues$"):
        permutation_uniformity(np.ones((5, 1)))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # degenerate tables give 0 without a division by zero
        for flat in (np.ones((5, 3)), np.zeros((5, 3)), np.ones((4, 3)) * [[1.0], [0.0], [1.0], [0.0]]):
            test = permutation_uniformity(flat, n_permutations=10)
            assert (test.method, test.statistic, test.p_value) == ("permutation within mappings", 0.0, 1.0)


def test_permutation_counts_every_chunk_and_ties_within_its_tolerance(monkeypatch):
    import phasekv.stats.uniformity as uniformity

    # one varying mapping at two residues: every permutation ties with the observed statistic
    tie = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    monkeypatch.setattr(uniformity, "_CHUNK_ELEMENTS", 3 * 2)  # three permutations per chunk, 20 = 6 x 3 + 2
    assert permutation_uniformity(tie, n_permutations=20, seed=1).p_value == 1.0
    monkeypatch.undo()
    # rows [1, 0] and [d, 0]: half the permutations give totals (1 + d, 0) or (0, 1 + d), the observed
    # statistic 4 (1 + d) / (3 - d) (about 4/3); the other half (1, d) or (d, 1), smaller by
    # 16 d / ((1 + d) (3 - d)) (about 5.33 d). That counts as a tie when within 1e-9 x observed.
    for d, ties in ((1.875e-10, True), (3e-10, False)):
        gap = 16 * d / ((1 + d) * (3 - d))
        observed = 4 * (1 + d) / (3 - d)
        assert (gap <= 1e-9 * observed) == ties
        test = permutation_uniformity(np.array([[1.0, 0.0], [d, 0.0]]), n_permutations=200, seed=0)
        assert test.statistic == pytest.approx(observed, rel=1e-12)
        if ties:
            assert test.p_value == 1.0
        else:
            assert 0.35 < test.p_value < 0.65, test.p_value


def test_summarize_mappings_fields_labels_and_trials_by_hand():
    # column totals [2, 1, 3, 4, 0] of 4 mappings: worst residue 4, best residue 3
    x = np.array(
        [[1, 0, 1, 1, 0], [1, 0, 1, 1, 0], [0, 1, 1, 1, 0], [0, 0, 0, 1, 0]],
        dtype=float,
    )
    d = summarize_mappings(x, stride=2, n_resamples=50, n_permutations=50).to_dict()
    assert (d["worst_residue"], d["best_residue"]) == (4, 3)
    assert d["accuracy"] == [0.5, 0.25, 0.75, 1.0, 0.0]
    # stride 2: phase 0 holds residues 0, 2, 4 (12 cells, 5 correct), phase 1 residues 1, 3 (8 cells, 5 correct)
    assert d["fold"] == {
        "phase": [0, 1],
        "n_residues": [3, 2],
        "counts": [12, 8],
        "successes": [5, 5],
        "accuracy": [5 / 12, 5 / 8],
    }
    assert (d["bootstrap_seed"], d["uniformity"]["seed"]) == (0, 0)  # the default seed
    assert d["design"] == "mappings x residues" and d["ci_method"] == "bootstrap percentile over mappings"
    haystacks = summarize_mappings(x, n_resamples=50, n_permutations=50, unit="haystack").to_dict()
    assert haystacks["design"] == "haystacks x residues"
    assert haystacks["ci_method"] == "bootstrap percentile over haystacks"
    one = summarize_mappings(x, n_resamples=50, n_permutations=50, trials_per_cell=1).to_dict()
    assert (one["trials_per_cell"], one["counts"], one["successes"]) == (1, [4] * 5, [2, 1, 3, 4, 0])
    near = x.copy()
    near[0, 4] = 1e-6  # within the 1e-6 tolerance of a whole number of prompts: rounded
    assert summarize_mappings(near, n_resamples=50, n_permutations=50, trials_per_cell=1).successes == [2, 1, 3, 4, 0]
    near[0, 4] = 2e-6
    with pytest.raises(ValueError, match=r"^cells must be multiples of 1/trials_per_cell = 1/1$"):
        summarize_mappings(near, n_resamples=50, n_permutations=50, trials_per_cell=1)
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match=rf"^trials_per_cell must be a positive integer, got {bad!r}$"):
            summarize_mappings(x, n_resamples=50, n_permutations=50, trials_per_cell=bad)


def test_summarize_mappings_uses_its_confidence_and_its_seed():
    # two mappings [1, 0] and [0, 1]: a resampled residue accuracy is 0, 1/2 or 1 with chances 1/4, 1/2, 1/4,
    # so the central 20% is [1/2, 1/2] and the central 95% is [0, 1]
    x = np.array([[1.0, 0.0], [0.0, 1.0]])
    narrow = summarize_mappings(x, n_resamples=2000, n_permutations=10, confidence=0.2)
    assert narrow.confidence == 0.2 and narrow.ci_low == narrow.ci_high == [0.5, 0.5]
    wide = summarize_mappings(x, n_resamples=2000, n_permutations=10)
    assert wide.ci_low == [0.0, 0.0] and wide.ci_high == [1.0, 1.0]
    # the permutation p-value follows the seed, and one seed gives one p-value
    flat = mapping_matrix(np.random.default_rng(4), 30, [0.8] * 4)
    p_values = {
        seed: [summarize_mappings(flat, n_resamples=10, n_permutations=2000, seed=seed).uniformity.p_value]
        for seed in range(4)
    }
    for seed in range(4):
        again = summarize_mappings(flat, n_resamples=10, n_permutations=2000, seed=seed).uniformity.p_value
        assert again == p_values[seed][0]
    assert len({p[0] for p in p_values.values()}) > 1
