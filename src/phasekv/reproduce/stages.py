"""The analyses that follow a profile's training, so that its report shows the whole paper at the
profile's scale: the knockout map, gate concentration with trajectories, gate cycling, a flip probe
with period detection, and the idealized theory (Theorems 1 and 2 and a small sweep).

A profile lists them as data (`profiles.Stage`: study, options, prompts, which runs); `run_stage` runs any
of them: it calls the library function behind the study's command (`phasekv knockout|gates|cycle|theory`,
`phasekv eval flip`) for every selected run and writes each result JSON under `out/analysis/`, where
`phasekv report` finds it. Results go through the one cache (`cache`), so a rerun computes only what
changed or is missing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from tqdm import tqdm

from ..model.io import read_config
from ..scoring import PhaseKVScorer
from ..studies.cycle.run import run_cycle
from ..studies.flip.run import run_flip
from ..studies.gates.run import run_gate_trajectory, run_gates
from ..studies.knockout.run import run_knockout
from ..tasks.lookup import LookupOptions, draw_mapping, held_out_matrix, unpadded_ids
from ..tasks.vocab import task_vocab
from ..theory.sweep import run_sweep
from ..theory.theorem1 import run_theorem1
from ..theory.theorem2 import train_gates
from .cache import cached_result, result_key
from .profiles import Profile, RunSpec, Stage
from .runner import final_checkpoint, run_dir


def analysis_scorer(checkpoint: Path):
    """The scorer every post-training analysis of a profile uses."""

    return PhaseKVScorer.from_checkpoint(checkpoint, threads=2, batch_size=16)


def labelled(result: dict, run: RunSpec) -> dict:
    """The run's name and label, so that the report names the model like the table does."""
    return {**result, "run": run.name, "label": run.label}


@dataclass(frozen=True)
class Job:
    """One study on one run (run and checkpoint None for a study without a model)."""

    out: Path
    run: RunSpec | None
    checkpoint: Path | None
    lookup: LookupOptions
    options: object
    progress: bool

    def scorer(self):
        return analysis_scorer(self.checkpoint)


def _knockout(job: Job) -> dict[str, Callable[[], dict]]:
    """Per-KV-head knockout map, calibration-mean replacement."""
    return {
        f"knockout-{job.run.name}": lambda: run_knockout(job.scorer(), job.lookup, job.options, progress=job.progress)
    }


def _gates(job: Job) -> dict[str, Callable[[], dict]]:
    """Gate concentration (static vs per window) at the run's end, and its trajectory recomputed at every saved
    checkpoint on the same lookup prompts."""
    batch = job.options.batch_size
    return {
        f"gates-{job.run.name}": lambda: run_gates(job.scorer(), job.lookup, batch),
        f"gate_trajectory-{job.run.name}": lambda: run_gate_trajectory(
            run_dir(job.out, job.run), job.lookup, batch, "checkpoints", progress=False
        ),
    }


def _cycle(job: Job) -> dict[str, Callable[[], dict]]:
    """Gate cycling by every delta (W = S runs)."""
    o = job.options
    return {
        f"cycle-{job.run.name}": lambda: run_cycle(
            job.scorer(), list(o.deltas), job.lookup, o.n_resamples, progress=job.progress
        )
    }


def _flip(job: Job) -> dict[str, Callable[[], dict]]:
    """The flip probe: one fixed lookup query (`flip_query`) shifted by filler one token at a time; candidates
    are the answer and the names of the records before and after the target. The stage's options give the
    filler lengths, families and permutations; the query, its candidates and the seed come from its prompts."""

    def compute() -> dict:
        scorer = job.scorer()
        context, candidates = flip_query(scorer.tokenizer, job.lookup)
        options = replace(job.options, context=context, candidates=candidates, seed=job.lookup.seed)
        return run_flip(scorer, options, progress=False)

    return {f"flip-{job.run.name}": compute}


def _theory(job: Job) -> dict[str, Callable[[], dict]]:
    """Theorem 1 (random starts vs one-hot assignments), Theorem 2 (gate training from a small ball) and a
    small Theorem 2 sweep."""
    o = job.options
    torch.set_num_threads(2)
    return {
        "theory/theorem1": lambda: run_theorem1(o.theorem1),
        "theory/theorem2": lambda: train_gates(o.theorem2),
        "theory/sweep": lambda: run_sweep(o.sweep, o.sweep_grid, list(o.sweep_seeds), progress=False),
    }


# study name -> (the results of one job: {result name: compute}, whether its prompts are lookup prompts)
STUDIES: dict[str, tuple[Callable[[Job], dict[str, Callable[[], dict]]], bool]] = {
    "knockout": (_knockout, True),
    "gates": (_gates, True),
    "cycle": (_cycle, True),
    "flip": (_flip, True),
    "theory": (_theory, False),
}


def selected_runs(profile: Profile, out: Path, stage: Stage) -> list[RunSpec]:
    """The runs of `profile` that `stage` measures (see `profiles.Stage`)."""
    if stage.runs == "none":
        return []
    runs = [run for run in profile.runs if stage.preset is None or run.preset == stage.preset]
    if stage.runs == "learned gates":  # full attention and uniform averaging have no learned gates to measure
        compressions = {run.name: read_config(final_checkpoint(out, run))[0].compression for run in runs}
        runs = [r for r in runs if compressions[r.name] is not None and compressions[r.name].gate != "uniform"]
    return runs


def run_stage(
    profile: Profile, out: Path, stage: Stage, runs: list[RunSpec] | None = None, progress: bool = False
) -> list[Path]:
    """Run `stage` on `runs` (default: the runs it selects) of a trained profile in `out`, reusing every result
    whose cache key is unchanged; returns the result paths written or reused."""
    if stage.study not in STUDIES:
        raise ValueError(f"unknown study {stage.study!r}; choose one of {', '.join(STUDIES)}")
    results, prompted = STUDIES[stage.study]
    lookup = replace(profile.lookup, **stage.lookup)
    options = {"lookup": lookup, "study": stage.options} if prompted else {"study": stage.options}
    if stage.runs == "none":
        targets = [None]
    else:
        targets = selected_runs(profile, out, stage) if runs is None else runs
    paths = []
    for run in targets:
        checkpoint = None if run is None else final_checkpoint(out, run)
        key = result_key(stage.study, options, checkpoint)
        job = Job(out, run, checkpoint, lookup, stage.options, progress)
        for name, compute in results(job).items():
            path = out / "analysis" / f"{name}.json"
            named = compute if run is None else lambda compute=compute, run=run: labelled(compute(), run)
            cached_result(path, key, named)
            paths.append(path)
    return paths


def run_stages(profile: Profile, out: Path, progress: bool = True) -> dict[str, dict]:
    """Run every analysis stage of `profile` in order; returns {study: {wall_seconds, cpu_seconds, files}} and
    prints each stage's times (cpu time: this process's, a load-independent measure)."""
    studies = [stage.study for stage in profile.analyses]
    if len(set(studies)) != len(studies):
        raise ValueError(f"a profile runs each study once; {profile.name} lists {', '.join(studies)}")
    unfinished = [run.name for run in profile.runs if final_checkpoint(out, run) is None]
    if unfinished:
        raise FileNotFoundError(f"analyses need every run trained; unfinished: {', '.join(unfinished)}")
    timings = {}
    for stage in profile.analyses:
        wall, cpu = time.perf_counter(), time.process_time()
        paths = run_stage(profile, out, stage)
        timings[stage.study] = {
            "wall_seconds": time.perf_counter() - wall,
            "cpu_seconds": time.process_time() - cpu,
            "files": [str(p.relative_to(out)) for p in paths],
        }
        if progress:
            tqdm.write(
                f"stage {stage.study}: {timings[stage.study]['wall_seconds']:.0f} s wall, "
                f"{timings[stage.study]['cpu_seconds']:.0f} s cpu, {len(paths)} result file(s)"
            )
    return timings


def flip_query(tokenizer, lookup) -> tuple[str, tuple[str, ...]]:
    """(context, candidates) of the flip probe: the first mapping of `lookup` written out without
    padding (records, demonstrations, "; target-key"), its target in the middle of the records;
    candidates " answer", then the names of the records just before and after the target."""

    vocab = task_vocab(tokenizer, n_animals=lookup.n_records, n_names=lookup.n_records)
    middle = lookup.n_records // 2
    mapping = draw_mapping(vocab, lookup, 0, middle, middle, held_out_matrix(vocab, lookup))
    ids = unpadded_ids(vocab, lookup, mapping)
    context = tokenizer.decode(ids)
    if tokenizer(context, add_special_tokens=False)["input_ids"] != ids:
        raise ValueError("the flip query does not survive decoding and encoding with this tokenizer")
    names = [mapping.name_ids[k] for k in (middle, middle - 1, middle + 1)]
    return context, tuple(" " + tokenizer.decode([int(n)]) for n in names)
