"""The training loop: `train(config, run_dir)` runs (or resumes) one run and returns its final checkpoint.

Run directory:

    run.json                     the RunConfig (a resume with a different config is refused)
    log.jsonl                    training and validation records (`log`)
    checkpoints/step_XXXXXX/     model + trainer state, written atomically (`checkpoint`)
    gates/step_XXXXXX.json       gate snapshots (`gates`), compressed models only
    tokenizer/                   the mixture's tokenizer (mixture data only)
    result.json                  {"checkpoint", "step", "metrics"} once the run has finished

The loss is the mean cross-entropy over scored tokens of the *global* batch: each process sums its
scored tokens' losses and divides by the all-reduced count, so any number of processes (and
accumulation micro-batches) computes the same loss and gradient as one process.
"""

from __future__ import annotations

import json
import shutil
import time
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from phasekv.corpus.batch import Batch, DataSource
from phasekv.corpus.mixed import MixedSource
from phasekv.corpus.mixture import MixtureSource
from phasekv.corpus.tokens import TokenWindowSource
from phasekv.files import disk_errors, write_atomic
from phasekv.memory import check_fits
from phasekv.model import PhaseKVModel, load_checkpoint
from phasekv.train.checkpoint import (
    CHECKPOINT_DIR,
    checkpoint_name,
    latest_checkpoint,
    load_trainer_state,
    mark_final,
    remove_partial,
    save_training_checkpoint,
)
from phasekv.train.config import RUN_FILE, RunConfig, RunConfigError, check_same_run, save_run_config
from phasekv.train.gates import gate_snapshot, write_snapshot
from phasekv.train.log import RunLog
from phasekv.train.optim import make_optimizer
from phasekv.train.regularize import capture_gates, static_concentration, step_offset
from phasekv.train.rng import capture_rng, restore_rng, seed_everything
from phasekv.train.runtime import Runtime, setup_runtime
from phasekv.train.schedule import learning_rate

RESULT_FILE = "result.json"
GATE_PROBE_SEQUENCES = 16


@dataclass(frozen=True)
class TrainResult:
    """The final checkpoint of a run, its step and metrics (loss, val_loss, val_accuracy, tokens, train_s,
    tokens_per_s)."""

    run_dir: Path
    checkpoint: Path
    step: int
    metrics: dict


def build_source(config: RunConfig) -> DataSource:
    """The data source a run config describes."""
    data = config.data
    if data.kind == "mixture":
        return MixtureSource(data.mixture, config.seq_len, config.steps, seed=data.seed)
    text = TokenWindowSource(data.tokens_dir, config.seq_len, seed=data.seed)
    if data.kind == "tokens":
        return text
    mixture = data.mixture if data.mixture.tokenizer else replace(data.mixture, tokenizer=text.header.get("tokenizer"))
    return MixedSource(MixtureSource(mixture, config.seq_len, config.steps, seed=data.seed), text, data.text_fraction)


def record_key_ids(source: DataSource) -> torch.Tensor:
    """The token ids of record keys (the task's animals) of a mixture or mixed source."""
    mixture = getattr(source, "mixture", source)
    if not isinstance(mixture, MixtureSource):
        raise RunConfigError('concentration_windows "records" needs mixture data (this source has no record keys)')
    return torch.as_tensor(mixture.vocab.pool("animals"))


def masked_sums(model: nn.Module, batch: Batch, runtime: Runtime) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Over the scored targets of one batch: (sum of cross-entropies, count, top-1 correct count)."""
    with runtime.autocast():
        logits = model(batch.inputs)
    flat = logits.float().flatten(0, 1)
    targets, mask = batch.targets.flatten(), batch.target_mask.flatten()
    losses = F.cross_entropy(flat, targets, reduction="none")
    correct = (flat.argmax(-1) == targets) & mask
    return (losses * mask).sum(), mask.sum(), correct.sum()


def _rank_slices(config: RunConfig, runtime: Runtime) -> list[range]:
    """This rank's micro-batches: sequence indices within the global batch."""
    parts = runtime.world * config.accum_steps
    if config.batch_size % parts:
        raise RunConfigError(
            f"batch_size {config.batch_size} must be divisible by processes x accum_steps = "
            f"{runtime.world} x {config.accum_steps}"
        )
    micro = config.batch_size // parts
    first = runtime.rank * config.accum_steps
    return [range((first + i) * micro, (first + i + 1) * micro) for i in range(config.accum_steps)]


def _prepare_run_dir(run_dir: Path, config: RunConfig, resume: bool, runtime: Runtime, source: DataSource) -> None:
    exists = (run_dir / RUN_FILE).is_file()
    if exists and not resume:
        raise RunConfigError(f"{run_dir} already holds a run: resume it (--resume) or choose a new output directory")
    if exists:
        check_same_run(run_dir, config)
    runtime.barrier()  # every rank has checked before rank 0 writes
    if runtime.is_main:
        made = not run_dir.exists()
        try:
            if not exists:
                run_dir.mkdir(parents=True, exist_ok=True)
                save_run_config(config, run_dir)
            remove_partial(run_dir)
            if isinstance(source, MixtureSource) and not (run_dir / "tokenizer").is_dir():
                with disk_errors(run_dir / "tokenizer"):
                    source.tokenizer.save_pretrained(run_dir / "tokenizer")
        except OSError:
            if not exists:  # a run that could not be set up leaves nothing, so the same command can run again
                if made:
                    shutil.rmtree(run_dir, ignore_errors=True)
                else:
                    (run_dir / RUN_FILE).unlink(missing_ok=True)
                    shutil.rmtree(run_dir / "tokenizer", ignore_errors=True)
            raise
    runtime.barrier()


class _Trainer:
    """One process's part of a run (state shared by the loop's steps)."""

    def __init__(self, config: RunConfig, run_dir: Path, runtime: Runtime, source: DataSource):
        self.config, self.run_dir, self.runtime, self.source = config, run_dir, runtime, source
        records = config.concentration_windows == "records"
        self.key_ids = record_key_ids(source).to(runtime.device) if records else None
        self.slices = _rank_slices(config, runtime)
        self.model_config = config.model_config(source.vocab_size)

    def start(self, checkpoint: Path | None, state: dict | None) -> tuple[nn.Module, torch.optim.Optimizer]:
        """Model and optimizer, fresh (seeded) or from `checkpoint` and its trainer `state`."""
        seed_everything(self.config.seed)
        model = self.runtime.wrap(load_checkpoint(checkpoint) if checkpoint else PhaseKVModel(self.model_config))
        optimizer = make_optimizer(model, self.config.optim)
        if checkpoint:
            self.runtime.load_optimizer(model, optimizer, state["optimizer"])
            restore_rng(state["rng"])
        return model, optimizer

    def step(self, model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> tuple[float, float, float, float]:
        """One optimiser step on global batch `step`; returns (loss, grad norm, lr, static concentration)
        (the last 0 unless static_concentration_weight is set)."""
        rt, cfg = self.runtime, self.config
        lr = learning_rate(step, cfg.steps, cfg.optim)
        for group in optimizer.param_groups:
            group["lr"] = lr
        batches = [self.source.batch("train", step, s).to(rt.device) for s in self.slices]
        count = rt.all_reduce_sum(sum(b.target_mask.sum() for b in batches)).clamp(min=1).item()
        total, gap_total = torch.zeros((), dtype=torch.float64), torch.zeros((), dtype=torch.float64)
        weight = cfg.static_concentration_weight
        for i, batch in enumerate(batches):
            with rt.no_sync(model, sync=i == len(batches) - 1), ExitStack() as scope:
                plain = rt.plain(model)
                if cfg.random_window_offset:
                    scope.enter_context(plain.window_offset(step_offset(cfg.seed, step, self.stride)))
                if step < cfg.indexer_warmup_steps:
                    scope.enter_context(plain.dense_indexer())
                gates = scope.enter_context(capture_gates(plain)) if weight else None
                loss_sum, _, _ = masked_sums(model, batch, rt)
                objective = loss_sum * (rt.world / count)  # DDP/FSDP average gradients over ranks
                if gates is not None:
                    keys = None if self.key_ids is None else torch.isin(batch.inputs, self.key_ids)
                    gap = static_concentration(gates, keys)
                    objective = objective + weight * gap / len(batches)  # mean over micro-batches and ranks
                    gap_total += gap.detach().double().cpu() / len(batches)
                objective.backward()
            total += loss_sum.detach().double().cpu()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
        norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm  # FSDP returns a DTensor
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        gap = rt.all_reduce_sum(gap_total).item() / rt.world
        return rt.all_reduce_sum(total).item() / count, float(norm), lr, gap

    @property
    def stride(self) -> int:
        return self.model_config.compression.stride

    @torch.no_grad()
    def validate(self, model: nn.Module) -> tuple[float, float]:
        """(mean loss, top-1 accuracy) over scored tokens of `val_batches` global validation batches."""
        module, rt = self.runtime.plain(model), self.runtime
        sums = torch.zeros(3, dtype=torch.float64)
        for position in range(self.config.val_batches):
            for s in self.slices:
                parts = masked_sums(module, self.source.batch("val", position, s).to(rt.device), rt)
                sums += torch.stack([p.double().cpu() for p in parts])
        total, count, correct = rt.all_reduce_sum(sums).tolist()
        return total / max(count, 1.0), correct / max(count, 1.0)

    @torch.no_grad()
    def snapshot_gates(self, model: nn.Module, step: int) -> None:
        if self.model_config.compression is None:
            return
        probe = self.source.batch("val", 0, range(min(self.config.batch_size, GATE_PROBE_SEQUENCES)))
        with self.runtime.autocast():
            snap = gate_snapshot(
                self.runtime.plain(model), self.model_config.compression, probe.inputs.to(self.runtime.device), step
            )
        if snap is not None and self.runtime.is_main:
            write_snapshot(self.run_dir, snap)

    def gates_due(self, step: int) -> bool:
        every = self.config.gate_every
        return step in self.config.gate_steps or bool(every and step % every == 0)

    def save(self, model: nn.Module, optimizer: torch.optim.Optimizer, step: int, metrics: dict) -> Path:
        """Write checkpoint `step` (collective: every rank calls; rank 0 writes)."""
        full, optim_state = self.runtime.full_states(model, optimizer)
        if self.runtime.is_main:
            state = {
                "step": step,
                "optimizer": optim_state,
                "schedule": {"step": step, "total_steps": self.config.steps},
                "rng": capture_rng(),
                "data": {"position": step},
                "metrics": metrics,
            }
            extra = {"step": step, "run": self.config.to_dict(), "data": self.source.describe()}
            save_training_checkpoint(self.run_dir, step, full, state, extra, keep=self.config.keep_checkpoints)
        self.runtime.barrier()
        return self.run_dir / CHECKPOINT_DIR / checkpoint_name(step)


def train(config: RunConfig, run_dir: str | Path, *, resume: bool = False, progress: bool = True) -> TrainResult:
    """Train (or, with `resume`, continue) the run `config` in `run_dir`; returns the final checkpoint.

    Works in one process or under torchrun (every process calls it with the same arguments). A run
    whose final checkpoint exists returns at once. `progress` shows a tqdm bar on rank 0.
    """
    run_dir = Path(run_dir)
    runtime = setup_runtime(config)
    try:
        source = build_source(config)
        config.check_model(config.model_config(source.vocab_size))  # before anything is written
        trainer = _Trainer(config, run_dir, runtime, source)  # checks how batches split over processes
        _check_memory(trainer)  # before a batch is drawn: a huge one would be drawn for minutes in silence
        _check_batches(trainer)
        _prepare_run_dir(run_dir, config, resume, runtime, source)
        result = _run(trainer, resume, progress)
    except BaseException:
        runtime.close(finished=False)  # another rank may never reach a last barrier
        raise
    runtime.close()
    return result


def _check_memory(trainer: _Trainer) -> None:
    """ValueError when one micro-batch cannot fit: a lower bound of what its forward and backward pass hold
    (the logits, their log-softmax and gradient, in float32; per layer a few hidden-state-sized activations)
    against the device's free memory (on the CPU, the machine's available memory)."""
    cfg, model = trainer.config, trainer.model_config
    rows = len(trainer.slices[0])
    per_token = 4 * (3 * model.vocab_size + 8 * model.num_layers * (model.hidden_size + model.intermediate_size))
    device = trainer.runtime.device
    available = torch.cuda.mem_get_info(device)[0] if device.type == "cuda" else None
    check_fits(
        per_token * rows * cfg.seq_len,
        f"a micro-batch of {rows} sequences x {cfg.seq_len} tokens" + (f" on {device}" if available else ""),
        "lower --batch-size or --seq-len (or raise --accum-steps)",
        available,
    )


def _check_batches(trainer: _Trainer) -> None:
    """Draw this process's first and last training batch and the first validation batch, so data that
    cannot be made (a sequence too short for a record) fails before the run folder is written: a
    corrected command can then start in the same folder."""
    check_fits = getattr(trainer.source, "check_fits", None)  # the mixture: every template, not one draw
    if check_fits is not None:
        check_fits()
    last = trainer.config.steps - 1
    for split, step in (("train", 0), ("train", last), ("val", 0)):
        for part in trainer.slices[:1]:
            trainer.source.batch(split, step, part)


def _run(trainer: _Trainer, resume: bool, progress: bool) -> TrainResult:
    cfg, rt, run_dir = trainer.config, trainer.runtime, trainer.run_dir
    checkpoint = latest_checkpoint(run_dir) if resume else None
    state = load_trainer_state(checkpoint) if checkpoint else None
    if state and state["step"] >= cfg.steps:
        if rt.is_main:
            mark_final(run_dir, checkpoint)  # runs finished before `final` links existed get one
        return TrainResult(run_dir, checkpoint, state["step"], state["metrics"])
    model, optimizer = trainer.start(checkpoint, state)
    start, metrics = (state["step"], dict(state["metrics"])) if state else (0, {})
    log = RunLog(run_dir, start, enabled=rt.is_main)
    tokens_per_step = cfg.batch_size * cfg.seq_len
    metrics.setdefault("tokens", 0)
    metrics.setdefault("train_s", 0.0)
    if start == 0 and trainer.gates_due(0):
        trainer.snapshot_gates(model, 0)
    window = {"loss": 0.0, "grad_norm": 0.0, "static_concentration": 0.0, "steps": 0, "seconds": 0.0}
    begun = time.perf_counter()
    with tqdm(total=cfg.steps, initial=start, unit="step", disable=not (progress and rt.is_main)) as bar:
        for step in range(start, cfg.steps):
            tick = time.perf_counter()
            loss, grad_norm, lr, gap = trainer.step(model, optimizer, step)
            seconds = time.perf_counter() - tick
            done = step + 1
            metrics["tokens"] += tokens_per_step
            metrics["train_s"] += seconds
            stats = (("loss", loss), ("grad_norm", grad_norm), ("static_concentration", gap), ("steps", 1))
            for key, value in (*stats, ("seconds", seconds)):
                window[key] += value
            final = done == cfg.steps
            if (cfg.log_every and done % cfg.log_every == 0) or final:
                n = window["steps"]
                metrics["loss"] = window["loss"] / n
                record = {
                    "step": done,
                    "loss": metrics["loss"],
                    "lr": lr,
                    "grad_norm": window["grad_norm"] / n,
                    "tokens_per_s": n * tokens_per_step / window["seconds"],
                    "tokens": metrics["tokens"],
                    "elapsed_s": time.perf_counter() - begun,
                }
                if cfg.static_concentration_weight:
                    record["static_concentration"] = window["static_concentration"] / n
                log.write(record)
                bar.set_postfix(loss=f"{metrics['loss']:.4f}", lr=f"{lr:.2e}", refresh=False)
                window = dict.fromkeys(window, 0.0)
            if (cfg.val_every and done % cfg.val_every == 0) or final:
                metrics["val_loss"], metrics["val_accuracy"] = trainer.validate(model)
                log.write({"step": done, "val_loss": metrics["val_loss"], "val_accuracy": metrics["val_accuracy"]})
            if trainer.gates_due(done):
                trainer.snapshot_gates(model, done)
            metrics["tokens_per_s"] = metrics["tokens"] / metrics["train_s"]
            if (cfg.checkpoint_every and done % cfg.checkpoint_every == 0) or final:
                checkpoint = trainer.save(model, optimizer, done, metrics)
            bar.update(1)
    result = TrainResult(run_dir, checkpoint, cfg.steps, metrics)
    if rt.is_main:
        mark_final(run_dir, checkpoint)
        record = {"checkpoint": str(checkpoint), "step": cfg.steps, "metrics": metrics}
        write_atomic(run_dir / RESULT_FILE, lambda tmp: Path(tmp).write_text(json.dumps(record, indent=2) + "\n"))
    return result
