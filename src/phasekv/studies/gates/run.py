"""Gate concentration on evaluation text, for one model or along a training run.

`run_gates(scorer, lookup)`: over every window of the (distinct) lookup prompts, the rows of
the model view's gate rows (`phasekv.internals.models`: phasekv models, DeepseekV4ForCausalLM): per
layer, KV head and branch the static and per-window effective numbers of offsets (phases for
W > S) and the phase share relative to uniform, value shifted back by one offset.

`run_gate_trajectory(run_dir, lookup)`: the same rows at every step of a training run. Source
"checkpoints" recomputes them from `run_dir/checkpoints/step_*` on the evaluation prompts (exact
metrics); "snapshots" reads `run_dir/gates/step_*.json` (written during training on its probe
sequences; they hold no raw alphas, so vector-gate channels count as windows there); "auto" uses
checkpoints when the run has any.

Results (JSON): `schema` "phasekv.gates/1" with the envelope, `options`, `n_windows_from`
(prompts), `rows`, and for models with a lightning indexer (DeepSeek-V4 CSA layers) `topk_hits`: how often
its picks at the query include the target record's entry, by phase and residue (`phasekv.internals.topk`);
trajectories: `schema` "phasekv.gate_trajectory/1", `run_dir`,
`source`, `steps` [{step, rows}].
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path

import torch

from phasekv.internals.design import ANALYSIS_LOOKUP
from phasekv.internals.models import model_name, view
from phasekv.internals.probe_prompts import batches, lookup_prompts, unique_ids
from phasekv.planning import Planner, Stage, WorkPlan, as_planner
from phasekv.provenance import software_versions
from phasekv.results.record import RunClock, prompt_prefix
from phasekv.scoring import load_scorer
from phasekv.studies.gates.options import GatesOptions
from phasekv.studies.gates.snapshots import snapshot_rows
from phasekv.tasks.lookup import LookupOptions
from phasekv.train.checkpoint import list_checkpoints

GATES = GatesOptions()  # the defaults, as `phasekv gates` takes them
SCHEMA = "phasekv.gates/1"
TRAJECTORY_SCHEMA = "phasekv.gate_trajectory/1"
SOURCES = ("auto", "checkpoints", "snapshots")
_SNAPSHOT = re.compile(r"^step_(\d+)\.json$")


def metrics_rows(model, ids: torch.Tensor, batch_size: int, progress: bool | Planner = False) -> list[dict]:
    """Gate metric rows of `model` over every window of ids [N, T] (`progress`: the planner whose "gate metrics"
    stage the batches are)."""
    device = next(model.parameters()).device
    parts = (b.to(device) for b in as_planner(progress).steps("gate metrics", batches(ids, batch_size)))
    return view(model).gate_rows(parts)


def gates_plan(scorer, ids: torch.Tensor, batch_size: int) -> WorkPlan:
    """What `run_gates` computes: one pass over the distinct prompts for the gates, one more for the
    lightning indexer's picks where the model has one."""
    passes = -(-ids.shape[0] // batch_size)
    unit = f"forward passes of up to {batch_size} prompts"
    stages = [Stage("gate metrics", passes, unit)]
    if view(scorer.model).has_indexer():
        stages.append(Stage("top-k hits", passes, unit))
    counts = {"distinct prompts": int(ids.shape[0]), "tokens each": int(ids.shape[1])}
    return WorkPlan(f"gate concentration of {model_name(scorer)}", tuple(stages), counts)


def run_gates(
    scorer,
    lookup: LookupOptions = ANALYSIS_LOOKUP,
    batch_size: int = GATES.batch_size,
    progress: bool | Planner = False,
) -> dict:
    """Gate metrics of `scorer.model` over the windows of the evaluation lookup prompts (`progress`: the plan,
    a bar and a time estimate, or the `Planner` to walk the stages of `gates_plan` with)."""
    clock = RunClock()
    prompts = lookup_prompts(scorer.tokenizer, lookup)
    ids, _ = unique_ids(prompts.prompts)
    planner = as_planner(progress)
    planner.start(gates_plan(scorer, ids, batch_size))
    rows = metrics_rows(scorer.model, ids, batch_size, planner)
    result = clock.envelope(
        "lookup",
        scorer,
        prompt_prefix(scorer.tokenizer),
        seed=lookup.seed,
        options=prompts.options,
        n_windows_from={"prompts": int(ids.shape[0]), "prompt_length": int(ids.shape[1])},
        rows=rows,
    )
    hits = view(scorer.model).topk_hits(prompts.prompts, batch_size, planner)
    planner.close()
    if hits:
        result["topk_hits"] = hits
    result["schema"] = SCHEMA
    result["analysis"] = "gates"
    return result


def is_run_dir(path: Path) -> bool:
    """A training run directory (checkpoints/ or gates/ inside, no config.json of its own)."""
    return not (path / "config.json").is_file() and ((path / "checkpoints").is_dir() or (path / "gates").is_dir())


def _snapshots(run_dir: Path) -> list[tuple[int, Path]]:
    root = run_dir / "gates"
    found = [(int(m.group(1)), p) for p in root.glob("step_*.json") if (m := _SNAPSHOT.match(p.name))]
    return sorted(found)


def run_gate_trajectory(
    run_dir: str | Path,
    lookup: LookupOptions = ANALYSIS_LOOKUP,
    batch_size: int = GATES.batch_size,
    source: str = "auto",
    progress: bool | Planner = True,
) -> dict:
    """Gate metric rows at every saved step of a training run (see the module docstring); `progress`: the plan,
    a bar and a time estimate, or the `Planner` to walk its one stage (the checkpoints or snapshots) with."""

    run_dir = Path(run_dir)
    if source not in SOURCES:
        raise ValueError(f"unknown trajectory source {source!r}; choose one of {SOURCES}")
    checkpoints, snapshots = list_checkpoints(run_dir), _snapshots(run_dir)
    if source == "auto":
        source = "checkpoints" if checkpoints else "snapshots"
    found = checkpoints if source == "checkpoints" else snapshots
    if not found:
        where = run_dir / ("checkpoints" if source == "checkpoints" else "gates")
        raise FileNotFoundError(f"{run_dir} has no {source} (looked in {where})")
    unit = "checkpoints, each loaded and measured on the lookup prompts" if source == "checkpoints" else "snapshots"
    planner = as_planner(progress)
    planner.start(WorkPlan(f"gate trajectory of {run_dir}", (Stage(source, len(found), unit),)))
    steps = []
    ids = None
    for step, path in planner.steps(source, found):
        if source == "snapshots":
            steps.append({"step": step, "rows": snapshot_rows(json.loads(path.read_text()))})
            continue
        scorer = load_scorer(path)
        if ids is None:
            ids, _ = unique_ids(lookup_prompts(scorer.tokenizer, lookup).prompts)
        steps.append({"step": step, "rows": metrics_rows(scorer.model, ids, batch_size)})
    planner.close()
    return {
        "schema": TRAJECTORY_SCHEMA,
        "analysis": "gate_trajectory",
        "run_dir": str(run_dir),
        "source": source,
        "source_note": (
            "recomputed from checkpoints on the evaluation lookup prompts"
            if source == "checkpoints"
            else "training gate snapshots (probe sequences; vector-gate channels pooled as windows)"
        ),
        "options": None if source == "snapshots" else {"lookup": asdict(lookup), "batch_size": batch_size},
        "steps": steps,
        "software": software_versions(),
    }


def format_gates(rows: list[dict]) -> str:
    """Text table: one line per layer, KV head and branch: effective numbers and the phase shares."""
    lines = [f"{'layer':>5} {'head':>4} {'branch':<6} {'static':>7} {'per-win':>7}  phase share (1 = uniform)"]
    for r in rows:
        extra = f" phases {r['static_phases']:.2f}/{r['per_window_phases']:.2f}" if "static_phases" in r else ""
        shares = " ".join(f"{s:4.2f}" for s in r["phase_share"])
        lines.append(
            f"{r['layer']:>5} {r['kv_head']:>4} {r['branch']:<6} {r['static_offsets']:7.2f} "
            f"{r['per_window_offsets']:7.2f}  {shares}{extra}"
        )
    return "\n".join(lines)
