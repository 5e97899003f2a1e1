"""Cross-seed statistics of a profile's table: one row per design (its seeds pooled) and the tests across
seeds that the profile states (`Profile.seed_comparisons`); see `phasekv.stats.seeds`."""

from __future__ import annotations

from ..stats.seeds import compare_seeds
from ..studies.designs.run import pooled
from .profiles import Profile


def design_rows(profile: Profile, rows: list[dict]) -> list[dict]:
    """Per design (in profile order): seeds, fraction learned, the mean over every seed and the gap over the
    learned seeds, with 95% t intervals. A seed at chance is flat for the wrong reason: its gap says nothing
    about phase, so it counts against the design's mean accuracy and learned fraction, not in its gap."""
    by_run = {row["run"]: row for row in rows}
    designs: dict[str, list[tuple[int, dict]]] = {}
    for run in profile.runs:
        designs.setdefault(run.design_name, []).append((run.seed, by_run[run.name]))
    table = []
    for design, members in designs.items():
        rows_of_design = [row for _, row in members]
        table.append(
            {
                "design": design,
                "seeds": [seed for seed, _ in members],
                "learned": sum(bool(row["learned"]) for row in rows_of_design) / len(members),
                "means": [row["mean"] for row in rows_of_design],
                **pooled(rows_of_design),
            }
        )
    return table


def comparisons(profile: Profile, table: list[dict]) -> list[dict]:
    """The profile's tests across seeds (exact permutation test, Welch's t beside it), on the gap of the learned
    seeds or, where a comparison names the metric "mean", on the mean accuracy of every seed; a test with fewer
    than 2 seeds on a side is reported as not testable."""
    values = {
        "gap": {row["design"]: row["gaps"] for row in table},
        "mean": {row["design"]: row["means"] for row in table},
    }
    found = []
    for a, b, alternative, claim, *rest in profile.seed_comparisons:
        metric = rest[0] if rest else "gap"
        if metric not in values:
            raise ValueError(f"seed comparison {claim!r}: unknown metric {metric!r}; choose gap or mean")
        by_design = values[metric]
        missing = [d for d in (a, b) if d not in by_design]
        if missing:
            raise ValueError(f"seed comparison {claim!r} names designs the profile lacks: {missing}")
        n = [len(by_design[a]), len(by_design[b])]
        head = {"claim": claim, "a": a, "b": b, "metric": metric}
        if min(n) < 2:
            found.append({**head, "testable": False, "n": n})
            continue
        found.append({**head, "testable": True, **compare_seeds(by_design[a], by_design[b], alternative)})
    return found


def _interval(summary: dict | None) -> str:
    if summary is None:
        return "- (no seed learned)"
    text = f"{summary['mean']:.1f}"
    return text + (f" [{summary['ci'][0]:.1f}, {summary['ci'][1]:.1f}]" if summary["ci"] else "")


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def markdown(table: list[dict], tests: list[dict]) -> str:
    lines = [
        "| Design | seeds | learned | mean (95% CI over seeds) | gap (95% CI over learned seeds) |",
        "|---|---|---:|---:|---:|",
    ]
    for row in table:
        seeds = ", ".join(str(s) for s in row["seeds"])
        lines.append(
            f"| {row['design']} | {seeds} | {row['learned']:.0%} | {_interval(row['mean'])} | {_interval(row['gap'])} |"
        )
    lines.append(
        "\nIntervals: t intervals of the mean over seeds (none with one seed); learned = fraction of seeds "
        "above chance; the gap is taken over the learned seeds only (a model at chance is flat for the wrong reason)."
    )
    if tests:
        on_means = any(t.get("metric") == "mean" for t in tests)
        lines += [
            "",
            f"| Claim ({'gap or mean' if on_means else 'gap'}, across seeds) | difference (Welch 95% CI) | "
            "p (exact permutation) | p (Welch) | Hedges' g |",
            "|---|---:|---:|---:|---:|",
        ]
        for t in tests:
            if not t["testable"]:
                seeds = "seeds" if t.get("metric") == "mean" else "learned seeds"
                lines.append(f"| {t['claim']} | - | not testable: {t['n'][0]} + {t['n'][1]} {seeds} | - | - |")
                continue
            ci = t["difference_ci"]
            diff = f"{t['difference']:.1f}" + (f" [{ci[0]:.1f}, {ci[1]:.1f}]" if ci else "")
            lines.append(
                f"| {t['claim']} | {diff} | {t['permutation_p']:.3g} (of {t['permutation_splits']} splits) | "
                f"{_number(t['welch_p'], '.3g')} | {_number(t['hedges_g'], '.2f')} |"
            )
        lines.append(
            (
                "\nOne-sided tests on the learned seeds' gaps (and, where the claim says mean, on every seed's mean "
                "accuracy), "
                if on_means
                else "\nOne-sided tests on the learned seeds' gaps, "
            )
            + "seeds as units: the exact permutation test over every "
            "split of the pooled "
            "seeds is the test of record (its smallest possible p is 1 / the number of splits: 1/70 = 0.014 with "
            "4 + 4 seeds, 1/20 = 0.05 with 3 + 3, 1/6 = 0.17 with 2 + 2); Welch's t test and Hedges' g (small-sample "
            "corrected "
            "standardised difference) beside it."
        )
    return "\n".join(lines)
