"""The run configuration: model, data, optimiser/schedule, loop sizes, intervals. Saved as run.json.

`RunConfig.to_dict()` / `RunConfig.from_dict()` round-trip through JSON. A run directory belongs to
one config: resuming with a different one is refused (`check_same_run`) and the message names the
fields that differ.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from phasekv.config import ConfigError, ModelConfig
from phasekv.corpus.mixture import MixtureConfig
from phasekv.files import write_atomic
from phasekv.model import preset_config

RUN_FILE = "run.json"
DATA_KINDS = ("mixture", "tokens", "mixed")
CONCENTRATION_WINDOWS = ("all", "records")
PRECISIONS = ("auto", "fp32", "bf16")
PARALLEL = ("ddp", "fsdp")


class RunConfigError(ConfigError):
    """A run config is invalid, or a run directory holds a different run."""


@dataclass(frozen=True)
class ModelSpec:
    """A model preset at a size, with ModelConfig field overrides; the vocabulary comes from the data."""

    preset: str = "w8s8-1kv"
    size: str = "tiny"
    overrides: dict[str, Any] = field(default_factory=dict)

    def build(self, vocab_size: int) -> ModelConfig:
        return preset_config(self.preset, self.size, vocab_size=vocab_size, **self.overrides)


@dataclass(frozen=True)
class DataConfig:
    """`kind` "mixture" (synthetic, `mixture` options), "tokens" (token directory `tokens_dir`) or
    "mixed" (`text_fraction` of every batch from `tokens_dir`, the rest from the mixture, whose
    tokenizer defaults to the token files'); `seed` fixes the data stream, independent of the model seed."""

    kind: str = "mixture"
    seed: int = 0
    mixture: MixtureConfig = field(default_factory=MixtureConfig)
    tokens_dir: str | None = None
    text_fraction: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in DATA_KINDS:
            raise RunConfigError(f"unknown data kind {self.kind!r}; choose one of {DATA_KINDS}")
        if self.kind in ("tokens", "mixed") and not self.tokens_dir:
            raise RunConfigError(f"data kind {self.kind!r} needs tokens_dir (made by `phasekv data tokenize`)")
        if (self.kind == "mixed") != (0 < self.text_fraction < 1) or not 0 <= self.text_fraction < 1:
            raise RunConfigError(
                f"text_fraction {self.text_fraction}: data kind 'mixed' needs 0 < text_fraction < 1, other kinds 0"
            )


@dataclass(frozen=True)
class OptimConfig:
    """AdamW (decay on weight matrices only), linear warm-up, cosine decay to lr * min_lr_fraction."""

    lr: float = 3e-3
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1
    warmup_steps: int = 100
    min_lr_fraction: float = 0.1
    grad_clip: float = 1.0

    def __post_init__(self) -> None:
        # written as `not ... > 0` so that NaN, which compares false to everything, is refused too
        if not self.lr > 0 or self.warmup_steps < 0 or not 0 <= self.min_lr_fraction <= 1 or not self.grad_clip > 0:
            raise RunConfigError(
                f"need lr > 0, warmup_steps >= 0, 0 <= min_lr_fraction <= 1 and grad_clip > 0; got {self}"
            )


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a training run.

    `batch_size` is the global batch (sequences per optimiser step, over all processes and
    `accum_steps` micro-batches); `seq_len` is T (model inputs per sequence). `seed` initialises
    the model; the data has its own seed. `threads`: torch threads per process (0: torch's
    default). Intervals are in optimiser steps (0 disables); a checkpoint is always written at the
    end, and `keep_checkpoints` (0: all) limits how many stay. `gate_steps` lists extra steps for
    gate snapshots (0 = before training). `parallel` picks DDP or FSDP when launched by torchrun.

    Training-time mitigations (compressed models only; `phasekv.train.regularize`):
    `random_window_offset` runs each step with every compressed layer's windows at one offset drawn
    from (seed, step), replacing the configured offsets for that step's forward and backward
    (validation, gate snapshots and checkpoints keep the configured ones);
    `static_concentration_weight` (lambda >= 0) adds lambda * (log W - H(E[alpha])) to the loss
    and logs the unweighted value as "static_concentration"; `concentration_windows` takes E[alpha] over
    "all" windows or only the "records" ones (windows holding a record key; mixture data only).

    `indexer_warmup_steps` (DeepSeek-V4 models with CSA layers): for the first N steps every CSA layer reads
    all visible entries while its lightning indexer learns from the KL to that dense attention; top-k after
    (validation, gate snapshots and checkpoints read top-k throughout).
    """

    model: ModelSpec | ModelConfig = field(default_factory=ModelSpec)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    steps: int = 1000
    batch_size: int = 16
    seq_len: int = 256
    accum_steps: int = 1
    seed: int = 0
    precision: str = "auto"
    parallel: str = "ddp"
    threads: int = 1
    checkpoint_every: int = 500
    keep_checkpoints: int = 0
    log_every: int = 10
    val_every: int = 100
    val_batches: int = 4
    gate_every: int = 0
    gate_steps: tuple[int, ...] = ()
    random_window_offset: bool = False
    static_concentration_weight: float = 0.0
    concentration_windows: str = "all"
    indexer_warmup_steps: int = 0

    def __post_init__(self) -> None:
        for key in ("steps", "batch_size", "seq_len", "accum_steps"):
            if getattr(self, key) < 1:
                raise RunConfigError(f"{key} must be >= 1, got {getattr(self, key)}")
        for key in (
            "threads",
            "checkpoint_every",
            "keep_checkpoints",
            "log_every",
            "val_every",
            "gate_every",
            "indexer_warmup_steps",
        ):
            if getattr(self, key) < 0:
                raise RunConfigError(f"{key} must be >= 0, got {getattr(self, key)}")
        if self.val_batches < 1:
            raise RunConfigError(f"val_batches must be >= 1, got {self.val_batches}")
        if self.precision not in PRECISIONS:
            raise RunConfigError(f"unknown precision {self.precision!r}; choose one of {PRECISIONS}")
        if self.parallel not in PARALLEL:
            raise RunConfigError(f"unknown parallel mode {self.parallel!r}; choose one of {PARALLEL}")
        object.__setattr__(self, "gate_steps", tuple(sorted(set(self.gate_steps))))
        if not isinstance(self.random_window_offset, bool):
            raise RunConfigError(f"random_window_offset must be true or false, got {self.random_window_offset!r}")
        weight = self.static_concentration_weight
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 <= weight < math.inf:
            raise RunConfigError(f"static_concentration_weight must be a finite number >= 0, got {weight!r}")
        if self.concentration_windows not in CONCENTRATION_WINDOWS:
            raise RunConfigError(
                f"unknown concentration_windows {self.concentration_windows!r}; choose one of {CONCENTRATION_WINDOWS}"
            )
        if self.concentration_windows != "all" and not weight:
            raise RunConfigError("concentration_windows needs static_concentration_weight > 0 (it has no effect alone)")
        if self.concentration_windows == "records" and self.data.kind == "tokens":
            raise RunConfigError('concentration_windows "records" needs mixture data (text has no record keys)')

    def model_config(self, vocab_size: int) -> ModelConfig:
        """The ModelConfig for data with `vocab_size` tokens."""
        if isinstance(self.model, ModelSpec):
            return self.model.build(vocab_size)
        if self.model.vocab_size < vocab_size:
            raise RunConfigError(f"model vocab_size {self.model.vocab_size} < the data's vocabulary {vocab_size}")
        return self.model

    def check_model(self, model: ModelConfig) -> None:
        """Raise RunConfigError if the training options do not fit `model` (the built model config)."""
        wanted = [k for k in ("random_window_offset", "static_concentration_weight") if getattr(self, k)]
        if wanted and model.compression is None:
            raise RunConfigError(f"{' and '.join(wanted)} need a compressed model; {model.name} has full attention")
        if self.indexer_warmup_steps and (model.dsv4 is None or "csa" not in model.dsv4.layer_types):
            raise RunConfigError(
                f"indexer_warmup_steps needs a DeepSeek-V4 model with CSA layers (dsv4-csa, dsv4-mix); {model.name} "
                "has no lightning indexer"
            )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (`model` holds either "spec" or "config")."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        key = "spec" if isinstance(self.model, ModelSpec) else "config"
        out["model"] = {key: asdict(self.model) if key == "spec" else self.model.to_dict()}
        out["data"], out["optim"] = asdict(self.data), asdict(self.optim)
        return json.loads(json.dumps(out))  # tuples become lists, as in the saved file

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise RunConfigError(f"unknown run config keys {unknown}; known keys are {sorted(known)}")
        data = dict(data)
        model = data.get("model", {"spec": {}})
        if set(model) == {"spec"}:
            data["model"] = ModelSpec(**model["spec"])
        elif set(model) == {"config"}:
            data["model"] = ModelConfig.from_dict(model["config"])
        else:
            raise RunConfigError('run config "model" must hold exactly one of "spec" or "config"')
        if "data" in data:
            d = dict(data["data"])
            d["mixture"] = MixtureConfig(**d.get("mixture", {}))
            data["data"] = DataConfig(**d)
        if "optim" in data:
            o = dict(data["optim"])
            o["betas"] = tuple(o.get("betas", OptimConfig.betas))
            data["optim"] = OptimConfig(**o)
        data["gate_steps"] = tuple(data.get("gate_steps", ()))
        return cls(**data)


def save_run_config(config: RunConfig, run_dir: Path) -> Path:
    path = run_dir / RUN_FILE
    write_atomic(path, lambda tmp: Path(tmp).write_text(json.dumps(config.to_dict(), indent=2) + "\n"))
    return path


def load_run_config(path: str | Path) -> RunConfig:
    """A RunConfig from a run.json file or a run directory."""
    path = Path(path)
    if path.is_dir():
        path = path / RUN_FILE
    if not path.is_file():
        raise RunConfigError(f"no run config at {path}")
    try:
        return RunConfig.from_dict(json.loads(path.read_text()))
    except (json.JSONDecodeError, TypeError) as err:
        raise RunConfigError(f"{path} is not a valid run config: {err}") from err


def _differences(a: Any, b: Any, prefix: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b))
        return [d for k in keys for d in _differences(a.get(k), b.get(k), f"{prefix}{k}.")]
    return [] if a == b else [f"{prefix.rstrip('.')}: run dir has {a!r}, requested {b!r}"]


def check_same_run(run_dir: Path, config: RunConfig) -> None:
    """Raise RunConfigError if run_dir's run.json describes a different run than `config`."""
    saved = load_run_config(run_dir).to_dict()  # options added since the run was saved take their defaults
    diffs = _differences(saved, config.to_dict())
    if diffs:
        raise RunConfigError(
            f"{run_dir} holds a different run; refusing to resume it. Differences: "
            + "; ".join(diffs)
            + ". Use a new output directory, or the saved config (--config "
            + str(run_dir / RUN_FILE)
            + ")."
        )
