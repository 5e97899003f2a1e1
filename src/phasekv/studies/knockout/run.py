"""The knockout map on the lookup probe: accuracy change per knocked-out head (or layer) and residue.

Modes:
* "heads": every (layer, KV head) of a phasekv model; at the final position the outputs z of the
  query heads that read the KV head are replaced by their calibration mean (`knockout.py`: one
  prefill per batch, then one final token per head from a cache fork);
* "layers": every layer's whole attention output at the last `n_query` positions is replaced by its
  calibration mean (`hf_layers.py`), for phasekv models and any HF causal LM.

Calibration prompts come from the lookup generator's calibration split (same design, own mappings)
and are checked to share no prompt with the evaluation prompts.

Result (JSON, `schema` "phasekv.knockout/1"): the evaluation envelope (model, scoring,
software, timing) plus `mode`, `options` (lookup options as generated), `knockout_options`,
`calibration` {split, n_mappings, n_prompts, n_unique_prompts, disjoint_from_eval}, `seed`,
`n_prompts`, `n_unique_prompts`, `modulus`, `stride` {value, source}, `clean` {accuracy,
accuracy_by_residue [M], accuracy_by_phase [S], counts_by_residue [M], counts_by_phase [S]} and
`targets`: one row per knocked-out head/layer with `layer`, `kv_head` (None in layers mode),
`accuracy`, `accuracy_by_residue`, `accuracy_by_phase`, `change_by_residue` / `change_by_phase`
(accuracy points, knocked - clean) and `relative_change_by_residue` / `relative_change_by_phase`
(100 (knocked - clean) / clean, in %; None where clean accuracy is 0). Residue = t_K mod M,
phase = t_K mod S.
"""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import torch

from phasekv.internals.design import ANALYSIS_LOOKUP
from phasekv.internals.models import model_name, view
from phasekv.internals.probe_prompts import batches, calibration_options, check_disjoint, lookup_prompts, unique_ids
from phasekv.planning import Planner, Stage, WorkPlan, as_planner
from phasekv.results.record import RunClock
from phasekv.scoring import check_finite
from phasekv.stats.stride import resolve_stride
from phasekv.studies.knockout.ablation import final_position_means, knockout_logits, kv_heads
from phasekv.studies.knockout.layers import final_attention_means, knocked_final_logits
from phasekv.tasks.lookup import LookupOptions

from .options import MODES, KnockoutOptions

SCHEMA = "phasekv.knockout/1"


def _accuracy_by(correct: np.ndarray, groups: np.ndarray, n: int) -> list[float]:
    return [float(correct[groups == g].mean()) for g in range(n)]


def _changes(knocked: list[float], clean: list[float]) -> tuple[list[float], list[float | None]]:
    points = [round(k - c, 6) for k, c in zip(knocked, clean, strict=True)]
    relative = [None if c == 0 else round(100 * (k - c) / c, 4) for k, c in zip(knocked, clean, strict=True)]
    return points, relative


@torch.no_grad()
def knockout_predictions(
    scorer, ids: torch.Tensor, means: torch.Tensor, options: KnockoutOptions, progress: bool | Planner = False
) -> tuple[torch.Tensor, dict[tuple[int, int | None], torch.Tensor]]:
    """Top-1 tokens at the final position of ids [U, T]: clean [U] and {(layer, kv_head or None): [U]}
    (`progress`: the planner whose "knockout" stage the steps are: batches in heads mode, forward passes in layers
    mode, so that a dry run on a large model times one pass, not a batch's 1 + layers)."""
    model, planner = scorer.model, as_planner(progress)
    clean_parts, knocked_parts = [], {}

    def top1(clean: torch.Tensor) -> torch.Tensor:
        # the knockout reads the model directly, not through its scorer: the same check, or a NaN would be a top-1
        done = sum(map(len, clean_parts))
        check_finite(clean[:, None], [ids.shape[1]] * len(clean), model_name(scorer), range(done, done + len(clean)))
        return clean.argmax(-1).cpu()

    if options.mode == "heads":
        for batch in planner.steps("knockout", batches(ids, options.batch_size)):
            clean, knocked = knockout_logits(model, batch.to(scorer.device), means)
            clean_parts.append(top1(clean))
            for key, logits in knocked.items():
                knocked_parts.setdefault(key, []).append(logits.argmax(-1).cpu())
    else:
        for batch in batches(ids, options.batch_size):
            batch = batch.to(scorer.device)
            for layer in (None, *range(means.shape[0])):
                with planner.step("knockout"):
                    logits = knocked_final_logits(model, batch, means, layer)
                if layer is None:
                    clean_parts.append(top1(logits))
                else:
                    knocked_parts.setdefault((layer, None), []).append(logits.argmax(-1).cpu())
    return torch.cat(clean_parts), {key: torch.cat(parts) for key, parts in knocked_parts.items()}


def knockout_map(
    prompts, clean_correct: np.ndarray, knocked_correct: dict, modulus: int, stride: int
) -> tuple[dict, list[dict]]:
    """Per-prompt correctness [N] (clean, and per target) -> (`clean` record, `targets` rows) as in the
    module docstring; residue = prompt.residue, phase = t_K mod stride."""
    residue = np.array([p.residue for p in prompts])
    phase = np.array([p.target_position % stride for p in prompts])
    clean = {
        "accuracy": float(clean_correct.mean()),
        "accuracy_by_residue": _accuracy_by(clean_correct, residue, modulus),
        "accuracy_by_phase": _accuracy_by(clean_correct, phase, stride),
        "counts_by_residue": np.bincount(residue, minlength=modulus).tolist(),
        "counts_by_phase": np.bincount(phase, minlength=stride).tolist(),
    }
    targets = []
    for (layer, head), correct in knocked_correct.items():
        by_residue, by_phase = _accuracy_by(correct, residue, modulus), _accuracy_by(correct, phase, stride)
        change_r, rel_r = _changes(by_residue, clean["accuracy_by_residue"])
        change_p, rel_p = _changes(by_phase, clean["accuracy_by_phase"])
        targets.append(
            {
                "layer": layer,
                "kv_head": head,
                "accuracy": float(correct.mean()),
                "accuracy_by_residue": by_residue,
                "accuracy_by_phase": by_phase,
                "change_by_residue": change_r,
                "change_by_phase": change_p,
                "relative_change_by_residue": rel_r,
                "relative_change_by_phase": rel_p,
            }
        )
    return clean, targets


def _means(scorer, cal_ids: torch.Tensor, options: KnockoutOptions, planner: Planner) -> torch.Tensor:
    cal = (b.to(scorer.device) for b in planner.steps("calibration", batches(cal_ids, options.batch_size)))
    if options.mode == "heads":
        return final_position_means(scorer.model, cal)
    return final_attention_means(scorer.model, cal, options.n_query)


def check_options(options: KnockoutOptions) -> None:
    """Raise ValueError for options no model can use (checked before any model loads)."""
    if options.mode not in MODES:
        raise ValueError(f"unknown knockout mode {options.mode!r}; choose one of {MODES}")
    if options.calibration_mappings < 1 or options.n_query < 1 or options.batch_size < 1:
        raise ValueError("calibration_mappings, n_query and batch_size must be >= 1")


def _check(scorer, options: KnockoutOptions) -> None:
    check_options(options)
    if options.mode == "heads" and not view(scorer.model).head_knockouts:
        raise ValueError(
            'per-KV-head knockouts need a phasekv model; for HF models knock out whole layers (mode="layers", --layers)'
        )


def _targets(scorer, options: KnockoutOptions) -> int:
    if options.mode == "heads":
        return len(kv_heads(scorer.model))
    return len(view(scorer.model).attention_sites())


def knockout_plan(scorer, options: KnockoutOptions, n_prompts: int, ids: torch.Tensor, cal_ids: torch.Tensor):
    """What `run_knockout` computes: calibration passes, then per batch of distinct prompts the clean and every
    knocked-out final logits."""
    size, targets = options.batch_size, _targets(scorer, options)
    n_batches = -(-ids.shape[0] // size)
    if options.mode == "heads":
        knockout = Stage(
            "knockout",
            n_batches,
            f"batches of up to {size} prompts, each a prefill, then {1 + targets} one-token passes (clean and each "
            "KV head knocked out)",
        )
    else:
        knockout = Stage(
            "knockout",
            n_batches * (1 + targets),
            f"full forward passes of up to {size} prompts ({n_batches} batches, each clean and with each of the "
            f"{targets} layers knocked out)",
        )
    stages = (
        Stage("calibration", -(-cal_ids.shape[0] // size), f"forward passes of up to {size} calibration prompts"),
        knockout,
    )
    counts = {
        "prompts": n_prompts,
        "distinct": int(ids.shape[0]),
        "tokens each": int(ids.shape[1]),
        "calibration prompts": int(cal_ids.shape[0]),
        "KV heads" if options.mode == "heads" else "layers": targets,
    }
    return WorkPlan(f"knockout map ({options.mode}) of {model_name(scorer)}", stages, counts)


def run_knockout(
    scorer,
    lookup: LookupOptions = ANALYSIS_LOOKUP,
    options: KnockoutOptions = KnockoutOptions(),
    progress: bool | Planner = True,
) -> dict:
    """The knockout map of `scorer.model` (a `PhaseKVScorer` or `HFScorer`) on the lookup probe (`progress`:
    the plan, a bar and a time estimate, or the `Planner` to walk the stages of `knockout_plan` with)."""
    _check(scorer, options)
    clock = RunClock()
    stride, stride_source = resolve_stride(options.stride, scorer.compression_stride, lookup.modulus)
    stride = stride or lookup.modulus
    evaluation = lookup_prompts(scorer.tokenizer, lookup)
    calibration = lookup_prompts(scorer.tokenizer, calibration_options(lookup, options.calibration_mappings))
    check_disjoint(evaluation.prompts, calibration.prompts)
    prompts = evaluation.prompts
    ids, rows = unique_ids(prompts)
    cal_ids, _ = unique_ids(calibration.prompts)
    planner = as_planner(progress)
    planner.start(knockout_plan(scorer, options, len(prompts), ids, cal_ids))
    means = _means(scorer, cal_ids, options, planner)
    clean_top, knocked_top = knockout_predictions(scorer, ids, means, options, planner)
    planner.close()
    answers = torch.tensor([p.answer_ids[0] for p in prompts])
    rows = torch.from_numpy(rows)
    clean, targets = knockout_map(
        prompts,
        (clean_top[rows] == answers).numpy(),
        {key: (top[rows] == answers).numpy() for key, top in knocked_top.items()},
        lookup.modulus,
        stride,
    )
    return clock.lookup_analysis(
        "knockout",
        SCHEMA,
        scorer,
        mode=options.mode,
        seed=lookup.seed,
        options=evaluation.options,
        knockout_options=asdict(options),
        calibration={
            "split": "calibration",
            "n_mappings": options.calibration_mappings,
            "n_prompts": len(calibration.prompts),
            "n_unique_prompts": int(cal_ids.shape[0]),
            "disjoint_from_eval": True,
        },
        n_prompts=len(prompts),
        n_unique_prompts=int(ids.shape[0]),
        modulus=lookup.modulus,
        stride={"value": stride, "source": stride_source},
        replaced=(
            "outputs z of the query heads reading the KV head, at the final position"
            if options.mode == "heads"
            else f"the layer's attention output at the last {options.n_query} position(s)"
        ),
        relative_change="100 * (knocked - clean) / clean accuracy, in %; None where clean accuracy is 0",
        clean=clean,
        targets=targets,
    )
