"""Train a profile's runs in parallel worker processes, then probe each trained model.

Training runs are separate `python -m phasekv.train` processes with one thread each (two threads per
process under contention run far slower than one), at most `jobs` at a time, longest first. A run
whose final checkpoint exists is skipped, so a rerun only evaluates; an interrupted run resumes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from tqdm import tqdm

from ..files import write_atomic
from ..internals.probe_prompts import lookup_prompts
from ..internals.topk import topk_hits_by_phase
from ..model.io import read_config
from ..scoring import PhaseKVScorer
from ..studies.probe.run import run_lookup
from ..train import latest_checkpoint, read_log
from ..train.checkpoint import mark_final
from ..train.config import RunConfigError, load_run_config, save_run_config
from .cache import cached_result, result_key
from .profiles import Profile, RunSpec


def run_dir(out: Path, run: RunSpec) -> Path:
    return out / "runs" / run.name


def final_checkpoint(out: Path, run: RunSpec) -> Path | None:
    ckpt = latest_checkpoint(run_dir(out, run))
    return ckpt if ckpt is not None and ckpt.name == f"step_{run.steps:06d}" else None


def _last_step(directory: Path) -> int:
    return max((row.get("step", 0) for row in read_log(directory)), default=0)


def reuse_source(profile: Profile, out: Path, run: RunSpec) -> Path | None:
    """The sibling output directory (one of `profile.reuse_from`, out/../<name>) that has finished `run` with
    exactly the same training config, if any."""
    wanted = profile.run_config(run).to_dict()
    for source in profile.reuse_from:
        other = out.parent / source
        if other.resolve() == out.resolve() or final_checkpoint(other, run) is None:
            continue
        try:
            if load_run_config(run_dir(other, run)).to_dict() == wanted:
                return other
        except RunConfigError:
            continue
    return None


def reuse_finished(profile: Profile, out: Path) -> list[str]:
    """Copy into `out` each unfinished run that a sibling output directory has finished with exactly the same
    training config (`reuse_source`); returns the copied run names."""
    copied = []
    for run in profile.runs:
        if final_checkpoint(out, run) is not None:
            continue
        other = reuse_source(profile, out, run)
        if other is not None:
            shutil.copytree(run_dir(other, run), run_dir(out, run), symlinks=True, dirs_exist_ok=True)
            copied.append(f"{run.name} (from {other})")
    return copied


def train_all(profile: Profile, out: Path, jobs: int, progress: bool = True) -> dict[str, float]:
    """Train every run of `profile` under `out/runs/` (skipping finished ones, copying identical finished
    runs of `profile.reuse_from`); returns wall seconds per trained run."""
    for name in reuse_finished(profile, out):
        tqdm.write(f"reused {name}")
    pending = sorted((r for r in profile.runs if final_checkpoint(out, r) is None), key=lambda r: -r.steps)
    total = sum(r.steps for r in profile.runs)
    bar = tqdm(total=total, desc=f"train ({profile.name})", unit="step", disable=not progress)
    bar.update(total - sum(r.steps for r in pending))
    running: dict[str, tuple[subprocess.Popen, float, RunSpec, object]] = {}
    seconds: dict[str, float] = {}
    shown = {r.name: 0 for r in pending}
    failures = []
    while pending or running:
        while pending and len(running) < jobs:
            run = pending.pop(0)
            directory = run_dir(out, run)
            directory.mkdir(parents=True, exist_ok=True)
            config = save_run_config(profile.run_config(run), out / "configs" / run.name)
            cmd = [
                sys.executable,
                "-m",
                "phasekv.train",
                "--config",
                str(config),
                "--out",
                str(directory),
                "--resume",
                "--no-progress",
            ]
            log = open(out / "configs" / run.name / "train.log", "ab")  # noqa: SIM115
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=_one_thread_env())
            running[run.name] = (proc, time.perf_counter(), run, log)
        time.sleep(2)
        for name, (proc, started, run, log) in list(running.items()):
            step = _last_step(run_dir(out, run))
            bar.update(max(0, step - shown[name]))
            shown[name] = max(shown[name], step)
            if proc.poll() is not None:
                log.close()
                del running[name]
                seconds[name] = time.perf_counter() - started
                bar.update(run.steps - shown[name])
                if proc.returncode != 0:
                    failures.append(f"{name} (exit {proc.returncode}; see {out / 'configs' / name / 'train.log'})")
    bar.close()
    if failures:
        raise RuntimeError("training failed: " + "; ".join(failures))
    return seconds


def _one_thread_env() -> dict[str, str]:

    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


EVERY_ENTRY = "every-entry"  # the counterfactual reading of a model with a lightning indexer


def evaluate_all(profile: Profile, out: Path, progress: bool = True, threads: int = 2) -> dict[str, dict]:
    """Probe every trained run with the profile's lookup options; results in out/results/, through the one cache
    (`cache`: reused while the checkpoint's contents, the options and the software are unchanged).

    A model with DeepSeek-V4 CSA layers is probed twice: as trained (its result records how often the indexer
    picked the target's entry, by phase) and, with the same weights, reading every visible entry instead of
    the indexer's top-k (`<run>-every-entry`): what top-k selection costs or gives, phase by phase."""
    results = {}
    for run in profile.runs:
        ckpt = final_checkpoint(out, run)
        if ckpt is None:
            raise FileNotFoundError(f"run {run.name} has no final checkpoint under {run_dir(out, run)}")
        mark_final(run_dir(out, run), ckpt)  # runs trained before `final` links existed get one
        results.update(_probe_run(profile, out, run, ckpt, progress, threads))
    return results


def _probe_run(profile: Profile, out: Path, run: RunSpec, ckpt: Path, progress: bool, threads: int) -> dict[str, dict]:
    """{result name: result} of one run's readings (see `evaluate_all`), one scorer loaded for those computed."""
    config = read_config(ckpt)[0]
    dsv4, compression = config.dsv4, config.compression
    readings = ("top-k", EVERY_ENTRY) if dsv4 is not None and "csa" in dsv4.layer_types else ("top-k",)
    scorer = None

    def probe(reading: str, name: str) -> dict:
        nonlocal scorer
        scorer = scorer or PhaseKVScorer.from_checkpoint(ckpt, threads=1, workers=threads, batch_size=16)
        if reading == "top-k":
            result = run_lookup(scorer, profile.lookup, progress=progress, grid_shift=shifted)
            hits = topk_hits_by_phase(scorer.model, lookup_prompts(scorer.tokenizer, profile.lookup).prompts)
            if hits:  # DeepSeek-V4 CSA layers: how often the indexer picks the target's entry, by phase
                result["topk_hits"] = hits
            label = run.label
        else:
            with scorer.model.dense_indexer():
                result = run_lookup(scorer, profile.lookup, progress=progress)
            result["counterfactual"] = "CSA layers read every visible entry, not the indexer's top-k (same weights)"
            label = f"{run.label} · every entry read"
        result.update(
            checkpoint=str(ckpt.resolve()),
            run=name,
            label=label,
            preset=run.preset,
            seed=run.seed,
            lookup_options=asdict(profile.lookup),
            training=_training_summary(run_dir(out, run)),
        )
        return result

    # the grid-shift test where the profile asks for it and the grid can move (a compressed cache, not top-k)
    shifted = profile.grid_shift and dsv4 is None and compression is not None and compression.stride >= 2
    results = {}
    for reading in readings:
        name = run.name if reading == "top-k" else f"{run.name}-{EVERY_ENTRY}"
        options = {"lookup": profile.lookup, "reading": reading}
        if shifted and reading == "top-k":  # keyed only when used: results probed without it stay valid
            options["grid_shift"] = True
        key = result_key("probe", options, ckpt)
        path = out / "results" / f"{name}.json"
        results[name], _ = cached_result(path, key, lambda reading=reading, name=name: probe(reading, name))
    return results


def logged_training_seconds(directory: Path) -> float | None:
    """Wall seconds a run spent training, from its log (None without timed records).

    `elapsed_s` counts from the start of each training process, so a resumed run's log holds one
    segment per process: a drop in `elapsed_s` starts a new segment, and the segments' last values add
    up. (A segment whose first record's elapsed_s exceeds the previous segment's last is not told apart.)"""
    total, last = 0.0, None
    for row in read_log(directory):
        if "elapsed_s" not in row:
            continue
        if last is not None and row["elapsed_s"] < last:
            total += last
        last = row["elapsed_s"]
    return None if last is None else total + last


def _training_summary(directory: Path) -> dict:
    rows = read_log(directory)
    val = [r for r in rows if "val_loss" in r]
    train_rows = [r for r in rows if "tokens_per_s" in r]
    return {
        "final_val_loss": val[-1]["val_loss"] if val else None,
        "final_val_accuracy": val[-1].get("val_accuracy") if val else None,
        "steps": max((r.get("step", 0) for r in rows), default=0),
        "tokens_per_s": sum(r["tokens_per_s"] for r in train_rows[-10:]) / max(1, len(train_rows[-10:])),
    }


def write_json(path: Path, data: dict) -> None:
    write_atomic(path, lambda tmp: Path(tmp).write_text(json.dumps(data, indent=2) + "\n"))
