"""The analyses that follow a profile's training, so that its report shows the whole paper at the
profile's scale: the knockout map, gate concentration with trajectories, gate cycling, a flip probe
with period detection, and the idealized theory (Theorems 1 and 2 and a small sweep).

Each stage calls the library function behind its command (`phasekv knockout|gates|cycle|theory`,
`phasekv eval flip`) and writes its result JSON under `out/analysis/`, where `phasekv report` finds it.
A result records what made it (`reproduce`: stage, checkpoint, settings); a rerun reuses every
result whose record matches, so only changed or missing ones are computed again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

import torch
from tqdm import tqdm

from ..evaluate import write_results
from ..model.io import read_config
from ..scoring import PhaseKVScorer
from ..studies.cycle.run import run_cycle
from ..studies.flip.options import FlipOptions
from ..studies.flip.run import run_flip
from ..studies.gates.run import run_gate_trajectory, run_gates
from ..studies.knockout.options import KnockoutOptions
from ..studies.knockout.run import run_knockout
from ..tasks.lookup import draw_mapping, held_out_matrix, unpadded_ids
from ..tasks.vocab import task_vocab
from ..theory.sweep import run_sweep
from ..theory.theorem1 import Theorem1Config, run_theorem1
from ..theory.theorem2 import GateTrainingConfig, train_gates
from .profiles import Profile, RunSpec
from .runner import final_checkpoint, run_dir
from .sizes import AnalysisSizes


def _normalised(value) -> object:
    """`value` as it reads back from JSON (tuples become lists), so records compare equal after a rerun."""
    return json.loads(json.dumps(value))


def cached_result(path: Path, record: dict, compute: Callable[[], dict]) -> tuple[dict, bool]:
    """(result, reused): the result at `path` when its `reproduce` record equals `record`, else
    `compute()` with the record added, written atomically to `path`."""
    record = _normalised(record)
    if path.is_file():
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError:
            data = None  # a torn or foreign file: compute it again
        if isinstance(data, dict) and data.get("reproduce") == record:
            return data, True
    result = compute()
    result["reproduce"] = record
    write_results(result, path)
    return result, False


def analysis_scorer(checkpoint: Path):
    """The scorer every post-training analysis of a profile uses."""

    return PhaseKVScorer.from_checkpoint(checkpoint, threads=2, batch_size=16)


def labelled(result: dict, run: RunSpec) -> dict:
    """The run's name and label, so that the report names the model like the table does."""
    return {**result, "run": run.name, "label": run.label}


class Stages:
    """The analysis stages of one profile's output directory; each returns the result paths it wrote
    or reused."""

    def __init__(self, profile: Profile, out: Path, sizes: AnalysisSizes, progress: bool = True):
        self.profile, self.out, self.sizes, self.progress = profile, out, sizes, progress
        self.dir = out / "analysis"
        self.checkpoints = {run.name: final_checkpoint(out, run) for run in profile.runs}
        missing = [name for name, ckpt in self.checkpoints.items() if ckpt is None]
        if missing:
            raise FileNotFoundError(f"analyses need every run trained; unfinished: {', '.join(missing)}")

    def _record(self, stage: str, run: RunSpec | None, settings: dict) -> dict:
        checkpoint = None if run is None else str(self.checkpoints[run.name].resolve())
        return {"stage": stage, "checkpoint": checkpoint, "settings": settings}

    def _lookup(self, mappings: int):
        return replace(self.profile.lookup, n_mappings=mappings, modulus=self.sizes.modulus)

    def knockout(self) -> list[Path]:
        """Per-KV-head knockout map of every run (the control's too), calibration-mean replacement."""

        lookup = self._lookup(self.sizes.knockout_mappings)
        options = KnockoutOptions(calibration_mappings=self.sizes.calibration_mappings)
        paths = []
        for run in self.profile.runs:
            path = self.dir / f"knockout-{run.name}.json"
            record = self._record("knockout", run, {"lookup": asdict(lookup), "knockout": asdict(options)})
            cached_result(
                path,
                record,
                lambda run=run: labelled(
                    run_knockout(analysis_scorer(self.checkpoints[run.name]), lookup, options, progress=False), run
                ),
            )
            paths.append(path)
        return paths

    def gates(self) -> list[Path]:
        """Gate concentration (static vs per window) of every compressed run at its end, and its
        trajectory recomputed at every saved checkpoint on the same lookup prompts."""

        lookup = self._lookup(self.sizes.gate_mappings)
        settings = {"lookup": asdict(lookup), "batch_size": 16}
        paths = []
        for run in self.profile.runs:
            compression = read_config(self.checkpoints[run.name])[0].compression
            if compression is None or compression.gate == "uniform":
                continue  # full attention and uniform averaging have no learned gates to measure
            final = self.dir / f"gates-{run.name}.json"
            cached_result(
                final,
                self._record("gates", run, settings),
                lambda run=run: labelled(run_gates(analysis_scorer(self.checkpoints[run.name]), lookup, 16), run),
            )
            trajectory = self.dir / f"gate_trajectory-{run.name}.json"
            cached_result(
                trajectory,
                self._record("gate_trajectory", run, settings),
                lambda run=run: labelled(
                    run_gate_trajectory(run_dir(self.out, run), lookup, 16, "checkpoints", progress=False), run
                ),
            )
            paths += [final, trajectory]
        return paths

    def cycle(self) -> list[Path]:
        """Gate cycling by every delta on each seed of the W = S preset `sizes.cycle_preset`."""

        lookup = self._lookup(self.sizes.cycle_mappings)
        deltas = list(self.sizes.cycle_deltas)
        settings = {"lookup": asdict(lookup), "deltas": deltas, "resamples": self.sizes.cycle_resamples}
        paths = []
        for run in self.profile.runs:
            if run.preset != self.sizes.cycle_preset:
                continue
            path = self.dir / f"cycle-{run.name}.json"
            cached_result(
                path,
                self._record("cycle", run, settings),
                lambda run=run: labelled(
                    run_cycle(
                        analysis_scorer(self.checkpoints[run.name]),
                        deltas,
                        lookup,
                        self.sizes.cycle_resamples,
                        progress=False,
                    ),
                    run,
                ),
            )
            paths.append(path)
        return paths

    def flip(self) -> list[Path]:
        """The flip probe on every run: one fixed lookup query shifted by filler one token at a time;
        candidates are the answer and the names of the records before and after the target."""

        paths = []
        for run in self.profile.runs:
            path = self.dir / f"flip-{run.name}.json"
            scorer = None

            def compute(run=run) -> dict:
                nonlocal scorer
                scorer = analysis_scorer(self.checkpoints[run.name])
                context, candidates = flip_query(scorer.tokenizer, self.profile.lookup)
                options = FlipOptions(
                    context=context,
                    candidates=candidates,
                    min_length=0,
                    n_lengths=self.sizes.flip_lengths,
                    families=self.sizes.flip_families,
                    n_permutations=self.sizes.flip_permutations,
                    seed=self.profile.lookup.seed,
                )
                return labelled(run_flip(scorer, options, progress=False), run)

            settings = {
                "lookup": asdict(self.profile.lookup),
                "lengths": self.sizes.flip_lengths,
                "families": list(self.sizes.flip_families),
                "permutations": self.sizes.flip_permutations,
            }
            cached_result(path, self._record("flip", run, settings), compute)
            paths.append(path)
        return paths

    def theory(self) -> list[Path]:
        """Theorem 1 (random starts vs one-hot assignments), Theorem 2 (gate training from a small
        ball) and a small Theorem 2 sweep, at the theory commands' default geometry."""

        torch.set_num_threads(2)
        t = self.sizes.theory
        theorem1 = Theorem1Config(n_starts=t.theorem1_starts, steps=t.theorem1_steps)
        theorem2 = GateTrainingConfig(steps=t.theorem2_steps, batch_size=t.theorem2_batch)
        sweep_base = GateTrainingConfig(steps=t.sweep_steps, batch_size=t.sweep_batch)
        jobs = {
            "theorem1": (asdict(theorem1), lambda: run_theorem1(theorem1)),
            "theorem2": (asdict(theorem2), lambda: train_gates(theorem2)),
            "sweep": (
                {"base": asdict(sweep_base), "grid": t.sweep_grid, "seeds": list(t.sweep_seeds)},
                lambda: run_sweep(sweep_base, t.sweep_grid, list(t.sweep_seeds), progress=False),
            ),
        }
        paths = []
        for name, (settings, compute) in jobs.items():
            path = self.dir / "theory" / f"{name}.json"
            cached_result(path, self._record(name, None, settings), compute)
            paths.append(path)
        return paths


STAGES = ("knockout", "gates", "cycle", "flip", "theory")


def run_stages(profile: Profile, out: Path, sizes: AnalysisSizes, progress: bool = True) -> dict[str, dict]:
    """Run every analysis stage in order; returns {stage: {wall_seconds, cpu_seconds, files}} and
    prints each stage's times (cpu time: this process's, a load-independent measure)."""
    stages = Stages(profile, out, sizes, progress)
    timings = {}
    for name in STAGES:
        wall, cpu = time.perf_counter(), time.process_time()
        paths = getattr(stages, name)()
        timings[name] = {
            "wall_seconds": time.perf_counter() - wall,
            "cpu_seconds": time.process_time() - cpu,
            "files": [str(p.relative_to(out)) for p in paths],
        }
        if progress:
            tqdm.write(
                f"stage {name}: {timings[name]['wall_seconds']:.0f} s wall, "
                f"{timings[name]['cpu_seconds']:.0f} s cpu, {len(paths)} result file(s)"
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
