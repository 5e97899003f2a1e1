"""Gate cycling on the lookup probe: does moving the static gate preferences move the weak spots?

For a W = S model, every delta cycles the offset-specific gate parameters (`cycling.cycle_gates`)
and the same lookup prompts are scored again. Accuracy is folded to phases r = residue mod S
(the modulus must be a multiple of S) per mapping, A_delta(r) is the mean over mappings, and

    observed change   A_delta(r) - A_0(r)
    predicted change  A_0((r - delta) mod S) - A_0(r)

R^2 is the squared Pearson correlation of the two over the phases except the boundary phase S - 1;
its 95% interval is a percentile bootstrap over mappings (one resample of mapping indices is used
for both the cycled and the uncycled cells, and both folds are recomputed).

Result (JSON, `schema` "phasekv.cycle/1"): the envelope, `options`, `deltas`, `stride`,
`modulus`, `boundary_phase`, `base` {accuracy_by_phase [S], band [S][2], accuracy_by_residue [M],
gate_key_phase_share [S]}, `cycles` [{delta, accuracy_by_phase, band, observed_change,
predicted_change, r2, r2_interval, gate_key_phase_share}] and `grid` {deltas [D], r2 [D],
r2_low [D], r2_high [D]}. R^2 is None where a change has no variance.
"""

from __future__ import annotations

import numpy as np

from phasekv.internals.design import ANALYSIS_LOOKUP
from phasekv.internals.gate_metrics import gate_metrics
from phasekv.internals.models import model_name, view
from phasekv.internals.probe_prompts import lookup_prompts, unique_ids
from phasekv.planning import Planner, Stage, WorkPlan, as_planner
from phasekv.results.record import RunClock
from phasekv.scoring import PhaseKVScorer
from phasekv.studies.cycle.cycling import check_cyclable, cycle_gates
from phasekv.studies.cycle.options import CycleOptions
from phasekv.studies.probe.scored import plan_prompt_set, score_prompt_set
from phasekv.studies.probe.units import unit_residue_cells
from phasekv.tasks.lookup import LookupOptions

SCHEMA = "phasekv.cycle/1"


def fold_cells(cells: np.ndarray, stride: int) -> np.ndarray:
    """Per-mapping accuracy by residue [n, M] -> by phase [n, S] (mean over residues r = phase mod S)."""
    n, modulus = cells.shape
    if modulus % stride:
        raise ValueError(f"the modulus {modulus} must be a multiple of the stride {stride} to fold by phase")
    return cells.reshape(n, modulus // stride, stride).mean(axis=1)


def r_squared(observed: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """Squared correlation along the last axis; NaN where either has no variance. [..., P] -> [...]."""
    o = observed - observed.mean(-1, keepdims=True)
    p = predicted - predicted.mean(-1, keepdims=True)
    denom = (o**2).sum(-1) * (p**2).sum(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, (o * p).sum(-1) ** 2 / np.where(denom > 0, denom, 1), np.nan)


def changes(base: np.ndarray, cycled: np.ndarray, delta: int) -> tuple[np.ndarray, np.ndarray]:
    """(observed, predicted) changes by phase from accuracies [..., S]."""
    return cycled - base, np.roll(base, delta, axis=-1) - base  # roll: out[r] = base[(r - delta) mod S]


def cycle_statistics(
    base_cells: np.ndarray, cycled_cells: np.ndarray, delta: int, n_resamples: int = 2000, seed: int = 0
) -> dict:
    """Phase-folded cells [n_mappings, S] of the uncycled and cycled model -> the record of one delta."""
    stride = base_cells.shape[1]
    keep = np.arange(stride - 1)  # the boundary phase S - 1 is excluded from R^2
    base, cycled = base_cells.mean(0), cycled_cells.mean(0)
    observed, predicted = changes(base, cycled, delta)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, base_cells.shape[0], size=(n_resamples, base_cells.shape[0]))
    base_b, cycled_b = base_cells[idx].mean(1), cycled_cells[idx].mean(1)  # [R, S]
    obs_b, pred_b = changes(base_b, cycled_b, delta)
    r2_b = r_squared(obs_b[:, keep], pred_b[:, keep])
    r2 = float(r_squared(observed[keep], predicted[keep]))
    finite = r2_b[np.isfinite(r2_b)]
    return {
        "delta": delta,
        "accuracy_by_phase": cycled.tolist(),
        "band": np.percentile(cycled_b, [2.5, 97.5], axis=0).T.tolist(),
        "observed_change": observed.round(6).tolist(),
        "predicted_change": predicted.round(6).tolist(),
        "r2": None if np.isnan(r2) else r2,
        "r2_interval": np.percentile(finite, [2.5, 97.5]).tolist() if finite.size else None,
        "r2_resamples_defined": int(finite.size),
    }


def _key_phase_share(model, ids) -> list[float]:
    rows = [r for r in gate_metrics(model, [ids]) if r["branch"] == "key"]
    return np.mean([r["phase_share"] for r in rows], axis=0).round(4).tolist()


def cycle_plan(scorer: PhaseKVScorer, shifts: list[int], prompts) -> WorkPlan:
    """What `run_cycle` computes: for every shift (0 first), one forward pass for the gate shares and the
    scoring of every prompt (its forward passes as `studies.probe.scored.plan_prompt_set` counts them)."""
    scoring = plan_prompt_set(prompts, scorer.batch_size)
    unit = f"forward passes of up to {scorer.batch_size} prompts ({scoring.n_batches} per shift, 1 for its gate shares)"
    counts = {"shifts": ", ".join(map(str, shifts)), "prompts": scoring.n_prompts, "distinct": scoring.n_rows}
    stages = (Stage("scoring", len(shifts) * (scoring.n_batches + 1), unit),)
    return WorkPlan(f"gate cycling of {model_name(scorer)}", stages, counts)


def run_cycle(
    scorer: PhaseKVScorer,
    deltas: list[int],
    lookup: LookupOptions = ANALYSIS_LOOKUP,
    n_resamples: int = CycleOptions().n_resamples,
    progress: bool | Planner = True,
) -> dict:
    """Cycle the gates of `scorer.model` by every delta and score the same lookup prompts (`progress`: the plan,
    a bar and a time estimate, or the `Planner` to walk the stages of `cycle_plan` with)."""
    model = scorer.model
    if not view(model).gate_cycling:
        raise ValueError("gate cycling needs a phasekv model with learned paper-style gates, not an HF model")
    check_cyclable(model)
    clock = RunClock()
    stride = model.config.compression.stride
    prompt_set = lookup_prompts(scorer.tokenizer, lookup)
    per_mapping = prompt_set.options["placements_per_mapping"]
    gate_ids = unique_ids(prompt_set.prompts)[0][: scorer.batch_size].to(scorer.device)
    shifts = [0, *[d for d in deltas if d != 0]]
    planner = as_planner(progress)
    planner.start(cycle_plan(scorer, shifts, prompt_set.prompts))
    folded, shares = {}, {}
    for delta in shifts:
        cycled = model if delta == 0 else cycle_gates(model, delta)
        cycled_scorer = PhaseKVScorer(
            cycled, scorer.tokenizer, batch_size=scorer.batch_size, device=str(scorer.device), dtype=scorer.dtype
        )
        with planner.step("scoring"):  # before the scoring: a dry run stops inside it, once a batch is timed
            shares[delta] = _key_phase_share(cycled, gate_ids)
        planner.restart_clock()
        scores = score_prompt_set(
            cycled_scorer, prompt_set.prompts, 1, f"delta {delta}", progress=lambda rows: planner.step_done("scoring")
        )
        cells = unit_residue_cells(scores, lookup.n_mappings, lookup.modulus, per_mapping)
        folded[delta] = fold_cells(cells, stride)
        if delta == 0:
            base_by_residue = cells.mean(0).tolist()
    planner.close()
    base = cycle_statistics(folded[0], folded[0], 0, n_resamples, lookup.seed)
    cycles = [
        {**cycle_statistics(folded[0], folded[d], d, n_resamples, lookup.seed), "gate_key_phase_share": shares[d]}
        for d in deltas
    ]
    return clock.lookup_analysis(
        "cycle",
        SCHEMA,
        scorer,
        seed=lookup.seed,
        options=prompt_set.options,
        n_prompts=len(prompt_set.prompts),
        deltas=deltas,
        stride=stride,
        modulus=lookup.modulus,
        boundary_phase=stride - 1,
        prediction="A_delta(r) ~ A_0((r - delta) mod S); changes relative to A_0(r)",
        r2_definition="squared Pearson correlation of observed and predicted change over phases 0..S-2",
        bootstrap={"unit": "mapping", "resamples": n_resamples, "interval": "95% percentile"},
        base={
            "accuracy_by_phase": base["accuracy_by_phase"],
            "band": base["band"],
            "accuracy_by_residue": base_by_residue,
            "gate_key_phase_share": shares[0],
        },
        cycles=cycles,
        grid={
            "deltas": deltas,
            "r2": [c["r2"] for c in cycles],
            "r2_low": [None if c["r2_interval"] is None else c["r2_interval"][0] for c in cycles],
            "r2_high": [None if c["r2_interval"] is None else c["r2_interval"][1] for c in cycles],
        },
    )


def _fmt(value: float | None) -> str:
    return "  n/a" if value is None else f"{value:5.2f}"


def format_cycle(result: dict) -> str:
    """Text table: per delta the observed/predicted change by phase (points) and R^2 with its interval."""
    stride = result["stride"]
    lines = [
        f"gate cycling: accuracy by phase (t_K mod {stride}); R^2 excludes the boundary phase {stride - 1}",
        f"{'delta':>5} " + " ".join(f"{'r=' + str(r):>11}" for r in range(stride)) + "    R^2 [95% CI]",
        f"{0:>5} " + " ".join(f"{100 * a:11.1f}" for a in result["base"]["accuracy_by_phase"]) + "    (uncycled, %)",
    ]
    for c in result["cycles"]:
        pairs = " ".join(
            f"{100 * o:+5.0f}/{100 * p:+5.0f}" for o, p in zip(c["observed_change"], c["predicted_change"], strict=True)
        )
        ci = "" if c["r2_interval"] is None else f" [{c['r2_interval'][0]:.2f}, {c['r2_interval'][1]:.2f}]"
        lines.append(f"{c['delta']:>5} {pairs}    {_fmt(c['r2'])}{ci}")
    lines.append("cells: observed/predicted change in accuracy points")
    return "\n".join(lines)
