"""Cross-seed statistics: summaries, tests across seeds, and the CPU profile's table on fabricated seeds."""

import math
from dataclasses import replace
from statistics import fmean

import numpy as np
import pytest
from scipy import stats

from phasekv.reproduce import across_seeds as seed_table
from phasekv.reproduce import get_profile
from phasekv.reproduce.training_plan import estimated_seconds, write_plan
from phasekv.stats.seeds import compare_seeds, hedges_g, seed_summary


def test_seed_summary_is_the_t_interval_over_seeds():
    s = seed_summary([10.0, 20.0, 30.0, 40.0])
    half = stats.t.ppf(0.975, 3) * np.std([10, 20, 30, 40], ddof=1) / 2
    assert s["mean"] == 25 and s["ci"] == pytest.approx([25 - half, 25 + half])
    assert seed_summary([5.0]) == {"n": 1, "mean": 5.0, "sd": None, "ci": None}
    with pytest.raises(ValueError):
        seed_summary([])


def _exact_permutation_p(a, b):
    """Reference: enumerate every split of the pooled seeds by hand."""
    from itertools import combinations

    pooled, n = np.array(a + b, dtype=float), len(a)
    observed = np.mean(a) - np.mean(b)
    splits = list(combinations(range(len(pooled)), n))
    hits = sum(pooled[list(idx)].mean() - np.delete(pooled, list(idx)).mean() >= observed - 1e-12 for idx in splits)
    return hits / len(splits)


def test_permutation_test_is_exact_and_agrees_with_enumeration():
    a, b = [97.0, 99.0, 62.0, 100.0], [0.0, 40.0, 0.0, 3.0]
    result = compare_seeds(a, b, "greater")
    assert result["permutation_p"] == pytest.approx(_exact_permutation_p(a, b))
    assert result["permutation_splits"] == math.comb(8, 4) == 70
    assert result["difference"] == pytest.approx(np.mean(a) - np.mean(b))
    assert result["welch_p"] == pytest.approx(stats.ttest_ind(a, b, equal_var=False, alternative="greater").pvalue)
    assert result["difference_ci"][0] < result["difference"] < result["difference_ci"][1]
    assert result["hedges_g"] > 1


def test_a_clean_separation_reaches_the_floor_and_the_wrong_direction_does_not():
    low, high = [0.0, 1.0, 0.0, 2.0], [95.0, 99.0, 97.0, 100.0]
    assert compare_seeds(high, low, "greater")["permutation_p"] == pytest.approx(1 / 70)
    assert compare_seeds(high, low, "less")["permutation_p"] == pytest.approx(1.0)
    overlapping = compare_seeds([50.0, 60.0, 40.0, 55.0], [52.0, 45.0, 58.0, 50.0], "greater")
    assert overlapping["permutation_p"] > 0.2


def test_degenerate_groups_keep_the_permutation_test_and_drop_what_is_undefined():
    result = compare_seeds([100.0, 100.0, 100.0, 100.0], [100.0, 100.0, 100.0, 100.0], "less")
    assert result["permutation_p"] == 1.0 and result["welch_p"] is None and result["hedges_g"] is None
    assert result["difference_ci"] is None
    # means 3 and 1, pooled sd sqrt(2), small-sample factor 1 - 3 / (4 * 4 - 9) = 4/7
    assert hedges_g(np.array([2.0, 4.0]), np.array([0.0, 2.0])) == pytest.approx(4 / 7 * 2 / math.sqrt(2))
    with pytest.raises(ValueError, match=">= 2 seeds"):
        compare_seeds([1.0], [2.0, 3.0])
    with pytest.raises(ValueError, match="alternative"):
        compare_seeds([1.0, 2.0], [2.0, 3.0], "two-sided")


def _fabricated_rows(profile, gaps: dict[str, list[float]]):
    """Per-run table rows: gaps (and means) by design, one value per seed in profile order."""
    used = {design: 0 for design in gaps}
    rows = []
    for run in profile.runs:
        design = run.design_name
        values = gaps.get(design, [0.0])
        gap = values[used.get(design, 0) % len(values)]
        used[design] = used.get(design, 0) + 1
        learned = gap is not None  # None: a seed at chance (flat: gap 0)
        rows.append(
            {"run": run.name, "model": run.label, "mean": 100 - (gap or 0) / 2, "gap": gap or 0.0, "learned": learned}
        )
    return rows


def test_cpu_profile_table_pools_seeds_and_tests_the_papers_two_claims():
    cpu = get_profile("cpu")
    assert {r.steps for r in cpu.runs} == {cpu.runs[0].steps}  # every model the same budget
    seeded = {d: sum(r.design_name == d for r in cpu.runs) for d in ("Full attention · 1 KV", "W8/S8 · 1 KV")}
    assert all(n >= 4 for n in seeded.values())
    gaps = {
        "Full attention · 1 KV": [0.0, 2.0, None, 1.0],  # seed 44 at chance: not in the gap statistics
        "W8/S8 · 1 KV": [97.0, 99.0, 95.0, 100.0],
        "W8/S4 · 1 KV": [100.0, 9.0, 100.0, 100.0],  # one seed covered every phase: not a clean "less"
    }
    table = seed_table.design_rows(cpu, _fabricated_rows(cpu, gaps))
    by = {row["design"]: row for row in table}
    assert by["W8/S8 · 1 KV"]["seeds"] == [42, 43, 44, 45] and by["W8/S8 · 1 KV"]["gap"]["mean"] == 97.75
    control = by["Full attention · 1 KV"]
    assert control["learned"] == 0.75 and control["gaps"] == [0.0, 2.0, 1.0] and control["mean"]["n"] == 4
    assert by["DeepSeek-style kernel"]["gap"]["ci"] is None
    tests = {t["claim"]: t for t in seed_table.comparisons(cpu, table)}
    assert tests["W8/S8 gap > full-attention gap"]["permutation_p"] == pytest.approx(1 / 35)  # 4 + 3 learned
    overlap = tests["W8/S4 gap < W8/S8 gap (overlap shrinks the gap)"]
    assert overlap["permutation_p"] == pytest.approx(
        _exact_permutation_p([97.0, 99.0, 95.0, 100.0], gaps["W8/S4 · 1 KV"])
    )
    text = seed_table.markdown(table, list(tests.values()))
    assert "| Full attention · 1 KV | 42, 43, 44, 45 | 75% | " in text and "(of 35 splits)" in text
    # one learned W8/S4 seed: the test cannot be made, and says so
    gaps["W8/S4 · 1 KV"] = [None, None, 9.0, None]
    table = seed_table.design_rows(cpu, _fabricated_rows(cpu, gaps))
    tests = {t["claim"]: t for t in seed_table.comparisons(cpu, table)}
    assert tests["W8/S4 gap < W8/S8 gap (overlap shrinks the gap)"] == {
        "claim": "W8/S4 gap < W8/S8 gap (overlap shrinks the gap)", "a": "W8/S4 · 1 KV", "b": "W8/S8 · 1 KV",
        "metric": "gap", "testable": False, "n": [1, 4],
    }  # fmt: skip
    assert "| - | not testable: 1 + 4 learned seeds |" in seed_table.markdown(table, list(tests.values()))


def test_round_four_tests_gaps_on_learned_seeds_and_means_on_every_seed():
    round4 = get_profile("round4")
    staggered, plain = "W8/S8 · 4 KV · grids staggered across KV heads", "W8/S8 · 4 KV"
    gaps = {staggered: [40.0, 30.0, None, 35.0], plain: [100.0, 100.0, 96.0, 98.0]}
    table = seed_table.design_rows(round4, _fabricated_rows(round4, gaps))
    by = {row["design"]: row for row in table}
    assert by[staggered]["means"] == [80.0, 85.0, 100.0, 82.5]  # the seed at chance counts in the mean
    tests = {t["claim"]: t for t in seed_table.comparisons(round4, table)}
    gap = tests["4 KV: staggered gap < unstaggered gap"]
    assert gap["metric"] == "gap" and gap["n"] == [3, 4] and gap["permutation_p"] == pytest.approx(1 / 35)
    mean = tests["4 KV: staggered mean > unstaggered mean"]
    assert mean["metric"] == "mean" and mean["n"] == [4, 4] and mean["permutation_splits"] == 70
    assert mean["difference"] == pytest.approx(fmean([80.0, 85.0, 100.0, 82.5]) - fmean([50.0, 50.0, 52.0, 51.0]))
    text = seed_table.markdown(table, list(tests.values()))
    assert "| Claim (gap or mean, across seeds) |" in text and "where the claim says mean" in text
    with pytest.raises(ValueError, match="unknown metric 'median'"):
        seed_table.comparisons(replace(round4, seed_comparisons=((staggered, plain, "less", "x", "median"),)), table)


def test_cpu_plan_lists_its_runs_and_an_estimate_under_two_hours(tmp_path):
    cpu = get_profile("cpu")
    text = write_plan(cpu, tmp_path)
    assert "estimated training time on a quiet 2-core CPU" in text and len(cpu.runs) == 20
    assert estimated_seconds(cpu) <= 2 * 3600 and estimated_seconds(get_profile("paper")) is None
    config = cpu.run_config(next(r for r in cpu.runs if r.name == "w8s8-4kv"))
    assert config.model.overrides["num_kv_heads"] == config.model.overrides["num_heads"] == 4


def test_welch_interval_seed_summary_and_the_comparison_record_against_scipy():
    a, b = [97.0, 99.0, 62.0], [0.0, 40.0, 0.0, 3.0, 21.0]  # unequal sizes and spreads
    result = compare_seeds(a, b, "greater")
    reference = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert result["difference_ci"] == pytest.approx([reference.low, reference.high], rel=1e-9)
    assert result["difference"] == pytest.approx(np.mean(a) - np.mean(b))
    assert set(result) == {"alternative", "n", "difference", "difference_ci", "permutation_p", "permutation_splits",
                           "welch_p", "hedges_g"}  # fmt: skip
    assert result["alternative"] == "greater" and result["n"] == [3, 5] and result["permutation_splits"] == 56
    same_spread = compare_seeds([1.0, 3.0], [5.0, 7.0], "less")  # equal variances: the interval is still defined
    reference = stats.ttest_ind([1.0, 3.0], [5.0, 7.0], equal_var=False).confidence_interval(0.95)
    assert same_spread["difference_ci"] == pytest.approx([reference.low, reference.high], rel=1e-9)
    small = compare_seeds([0.1, 0.2], [0.1, 0.1], "greater")  # tiny spread, one group without any: Welch defined
    assert small["welch_p"] == pytest.approx(stats.ttest_ind([0.1, 0.2], [0.1, 0.1], equal_var=False,
                                                             alternative="greater").pvalue)  # fmt: skip
    assert compare_seeds([0.1, 0.1], [0.1, 0.2], "less")["welch_p"] is not None
    # 8 + 8 seeds: 12,870 splits, more than scipy's default resamples, so exactness is the option's doing
    high, low = [5.0, 7.0, 6.0, 9.0, 4.0, 8.0, 6.5, 7.5], [3.0, 6.0, 2.0, 5.5, 4.5, 1.0, 6.2, 3.5]
    exact = compare_seeds(high, low, "greater")
    assert exact["permutation_p"] == pytest.approx(_exact_permutation_p(high, low), abs=1e-12)
    assert exact["permutation_splits"] == 12870
    two = seed_summary([10.0, 14.0])
    half = stats.t.ppf(0.975, 1) * np.std([10, 14], ddof=1) / math.sqrt(2)
    assert two == {
        "n": 2,
        "mean": 12.0,
        "sd": pytest.approx(np.std([10, 14], ddof=1)),
        "ci": pytest.approx([12 - half, 12 + half]),
    }
    with pytest.raises(ValueError, match="^no seeds to summarise$"):
        seed_summary([])
