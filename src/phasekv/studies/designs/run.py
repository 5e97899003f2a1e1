"""The designs comparison: every design (its seeds side by side) against W8/S8 · 1 KV and full attention.

A design meets the target when every seed (and the control) has learned and, averaged over its seeds,
its gap is within 5 points of full attention's gap, its mean accuracy is at least W8/S8's, and its cache
grows by the same number of bytes per token.
The best design that learned (smallest mean gap, then highest mean) gets a knockout map and, where
defined (W = S, learned gates), gate cycling.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from statistics import fmean

from phasekv.config import ModelConfig
from phasekv.files import write_atomic
from phasekv.stats.seeds import seed_summary
from phasekv.studies.probe.like import remeasure_list

SCHEMA = "phasekv.designs/1"
BASELINE_PRESET = "w8s8-1kv"
GAP_MARGIN = 5.0  # points


def cache_bytes_per_token(config: ModelConfig, dtype_bytes: int = 4) -> float:
    """Bytes by which the decode cache grows per token, summed over layers (the fixed-size local window and
    token-shift state excluded): one entry per S tokens per KV head, holding K and V unless they are shared."""
    kv = config.num_kv_heads * config.head_dim * dtype_bytes
    c = config.compression
    if config.dsv4 is not None:  # K=V entries: CSA's (with the indexer's key) every S tokens, HCA's every hca_rate
        layers = config.dsv4
        csa = (kv + layers.index_head_dim * dtype_bytes) / c.stride
        per_type = {"sliding": 0.0, "csa": csa, "hca": kv / layers.hca_rate}
        return sum(per_type[kind] for kind in layers.layer_types)
    per_layer = 2 * kv if c is None else (1 if c.shared_kv else 2) * kv / c.stride
    return config.num_layers * per_layer


def _gate_effective(run_dir: Path, steps: int) -> dict | None:
    """Key-gate effective numbers of offsets per layer (static, per window) and, with overlapping windows, the
    mean weight of one overlap slot (slots S..W-1: tokens that the next window holds too) per layer, from the
    final gate snapshot (sigmoid gates as shares of their window's total: 1/W is uniform for every gate)."""
    path = run_dir / "gates" / f"step_{steps:06d}.json"
    if not path.is_file():
        return None
    snapshot = json.loads(path.read_text())
    layers, stride = snapshot["layers"], snapshot["stride"]
    return {
        "static": [fmean(layer["key"]["static_effective"]) for layer in layers],
        "per_window": [fmean(layer["key"]["per_window_effective"]) for layer in layers],
        "overlap": [fmean(w for head in layer["key"]["mean_by_offset"] for w in head[stride:]) for layer in layers]
        if snapshot["window"] > stride
        else None,
    }


def _over_seeds(gates: list[dict], key: str) -> list[float] | None:
    """Per-layer means over the seeds of one gate statistic (None when no seed has it)."""
    values = [g[key] for g in gates if g.get(key) is not None]
    return [fmean(v) for v in zip(*values, strict=True)] if values else None


def pooled(rows: list[dict]) -> dict:
    """One design's seeds (table rows with mean, gap, learned) pooled: {mean, gap, gaps}, the mean over every
    seed and the gap over the learned ones (a seed at chance is flat for the wrong reason), 95% t intervals."""
    gaps = [row["gap"] for row in rows if row["learned"]]
    return {
        "mean": seed_summary([row["mean"] for row in rows]),
        "gap": seed_summary(gaps) if gaps else None,
        "gaps": gaps,
    }


def design_rows(profile, rows: dict[str, dict], configs: dict[str, ModelConfig], out: Path) -> list[dict]:
    """One row per design: its seeds' table rows (`rows`, by run name), their means, cache bytes and gates.
    `profile` is a reproduction profile (`phasekv.reproduce.profiles.Profile`): its runs, grouped by design."""
    designs: dict[str, list] = {}
    for run in profile.runs:
        designs.setdefault(run.design_name, []).append(run)
    table = []
    for design, runs in designs.items():
        seeds = [rows[r.name] for r in runs]
        gates = [_gate_effective(out / "runs" / r.name, r.steps) for r in runs]
        gates = [g for g in gates if g is not None]
        over_seeds = pooled(seeds)
        table.append(
            {
                "design": design,
                "preset": runs[0].preset,
                "training": runs[0].training,
                "runs": [r.name for r in runs],
                "seeds": [r.seed for r in runs],
                "control": runs[0].is_control,
                "baseline": runs[0].preset == BASELINE_PRESET and not runs[0].training,
                "cache_bytes_per_token": cache_bytes_per_token(configs[runs[0].name]),
                "val_loss": [s["val_loss"] for s in seeds],
                "mean": [s["mean"] for s in seeds],
                "mean_over_seeds": over_seeds["mean"],
                "gap_over_seeds": over_seeds["gap"],
                "worst": [s["worst"] for s in seeds],
                "gap": [s["gap"] for s in seeds],
                "gap_ci": [s["gap_ci"] for s in seeds],
                "period_diff": [s["period_diff"] for s in seeds],
                "learned": [s["learned"] for s in seeds],
                "key_gate_static": _over_seeds(gates, "static"),
                "key_gate_per_window": _over_seeds(gates, "per_window"),
                "key_gate_overlap": _over_seeds(gates, "overlap"),
            }
        )
    _judge(table)
    return table


def _judge(table: list[dict]) -> None:
    """Add `meets_target` (and why not) to every compressed design that is not the baseline."""
    control = next((d for d in table if d["control"]), None)
    baseline = next((d for d in table if d["baseline"]), None)
    for d in table:
        if d["control"] or d["baseline"] or control is None or baseline is None:
            continue
        misses = []
        if not all(d["learned"]) or not all(control["learned"]):
            misses.append(
                "not learned (chance): flat for the wrong reason"
                if not all(d["learned"])
                else "the control has not learned"
            )
        if fmean(d["gap"]) > fmean(control["gap"]) + GAP_MARGIN:
            misses.append(f"gap {fmean(d['gap']):.1f} > full attention's {fmean(control['gap']):.1f} + {GAP_MARGIN:g}")
        if fmean(d["mean"]) < fmean(baseline["mean"]):
            misses.append(f"mean {fmean(d['mean']):.1f} < W8/S8's {fmean(baseline['mean']):.1f}")
        if d["cache_bytes_per_token"] != baseline["cache_bytes_per_token"]:
            misses.append("cache bytes differ from W8/S8's")
        d["meets_target"], d["misses"] = not misses, misses


def best_design(table: list[dict]) -> dict | None:
    """The candidate (not the control, not the baseline) whose seeds all learned with the smallest mean gap,
    then the highest mean; None when no candidate learned (a model at chance has nothing to knock out)."""
    candidates = [d for d in table if not d["control"] and not d["baseline"] and all(d["learned"])]
    return min(candidates, key=lambda d: (fmean(d["gap"]), -fmean(d["mean"])), default=None)


def best_seed(design: dict) -> str:
    """The run of `design`'s learned seed with the highest mean accuracy: the clearest view of its mechanism."""
    seeds = zip(design["mean"], design["runs"], design["learned"], strict=True)
    learned = [(mean, run) for mean, run, ok in seeds if ok]
    if not learned:
        raise ValueError(f"design {design['design']!r} has no learned seed")
    return max(learned)[1]


def best_of(table: list[dict], usable: Callable[[str], bool]) -> dict | None:
    """The candidate design with a learned seed whose runs are all `usable`, ranked by the mean gap of its learned
    seeds, then their mean accuracy (for an analysis that not every design admits, such as gate cycling)."""

    def learned(d: dict, key: str) -> list[float]:
        return [v for v, ok in zip(d[key], d["learned"], strict=True) if ok]

    candidates = [
        d
        for d in table
        if not d["control"] and not d["baseline"] and any(d["learned"]) and all(usable(run) for run in d["runs"])
    ]
    return min(candidates, key=lambda d: (fmean(learned(d, "gap")), -fmean(learned(d, "mean"))), default=None)


def cycle_target(
    table: list[dict], knocked: str, problem: Callable[[str], str | None]
) -> tuple[str | None, str | None]:
    """(run to cycle, note): the knocked-out run when gate cycling is defined for it (`problem(run)` is None),
    else the best learned seed of the best candidate for which it is, with a note saying why."""
    why = problem(knocked)
    if why is None:
        return knocked, None
    other = best_of(table, lambda run: problem(run) is None)
    if other is None:
        return None, f"no gate cycling for {knocked}: {why}; no learned W = S candidate to cycle instead"
    cycled = best_seed(other)
    return cycled, (
        f"no gate cycling for {knocked}: {why}; cycled instead: {cycled}, the best learned seed of the best "
        f"W = S candidate ({other['design']})"
    )


def _seeds(values: list[float], fmt: str = "{:.1f}") -> str:
    return " / ".join(fmt.format(v) for v in values)


def markdown(table: list[dict], results_dir: Path | None = None) -> str:
    """The designs table; with `results_dir` (where the runs' probe results are) it lists the command that
    re-measures each seed of each row."""
    lines = [
        "| Design | seeds | cache B/token | val. loss | mean | worst | gap | period diff. | key gate eff. "
        "(static; per window) | key gate weight per overlap slot | target |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|---|",
    ]
    for d in table:
        gates = "-"
        if d["key_gate_static"]:
            gates = "; ".join(
                f"L{i} {s:.1f}; {w:.1f}"
                for i, (s, w) in enumerate(zip(d["key_gate_static"], d["key_gate_per_window"], strict=True))
            )
        overlap = "-"
        if d.get("key_gate_overlap"):
            overlap = "; ".join(f"L{i} {w:.3f}" for i, w in enumerate(d["key_gate_overlap"]))
        target = (
            "control" if d["control"] else "baseline" if d["baseline"] else "met" if d["meets_target"] else "missed"
        )
        lines.append(
            f"| {d['design']} | {_seeds(d['seeds'], '{}')} | {d['cache_bytes_per_token']:.0f} | "
            f"{_seeds(d['val_loss'], '{:.3f}')} | {_seeds(d['mean'])} | {_seeds(d['worst'])} | {_seeds(d['gap'])} | "
            f"{_seeds(d['period_diff'])} | {gates} | {overlap} | {target} |"
        )
    lines.append(
        "\nOne value per seed (seeds in the order listed), accuracies in percent, gap = best - worst residue in "
        "points; cache B/token = float32 bytes the decode cache grows by per token (all layers); key gate eff. = "
        f"effective number of offsets of each layer's key gate (1 = one offset, W = uniform); key gate weight per "
        "overlap slot = mean weight of one slot whose token the next window holds too (W > S only; uniform = 1/W). "
        f"Target: gap within "
        f"{GAP_MARGIN:g} points of full attention's, mean >= W8/S8's, same cache bytes (seed means)."
    )
    if results_dir is not None:
        lines.append(
            remeasure_list(
                (f"{d['design']}, seed {seed}", f"phasekv eval lookup --like {results_dir / f'{run}.json'}")
                for d in table
                for seed, run in zip(d["seeds"], d["runs"], strict=True)
            )
        )
    return "\n".join(lines)


def write_designs(table: list[dict], out: Path, mechanism: dict) -> None:
    """designs.json (the table and `mechanism`: knockout_run, cycle_run, cycle_note, tests) and designs.md."""
    data = {"schema": SCHEMA, "designs": table, **mechanism}
    write_atomic(out / "designs.json", lambda tmp: Path(tmp).write_text(json.dumps(data, indent=2) + "\n"))
    write_atomic(
        out / "designs.md",
        lambda tmp: Path(tmp).write_text(f"# Designs against the weak spots\n\n{markdown(table, out / 'results')}\n"),
    )
