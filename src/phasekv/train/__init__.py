"""Pretraining: run config, AdamW + warm-up/cosine schedule, atomic checkpoints and exact resume,
JSONL logs, gate snapshots, and torchrun (DDP; FSDP for large models).

Drive it from Python::

    from phasekv.train import RunConfig, ModelSpec, train
    result = train(RunConfig(model=ModelSpec("w8s8-1kv", "tiny"), steps=600), "runs/w8s8", resume=True)
    result.checkpoint  # runs/w8s8/checkpoints/step_000600 (phasekv.model.load_checkpoint reads it)

Modules: `config`, `schedule`, `optim`, `rng`, `checkpoint`, `log`, `gates`, `runtime`, `loop`;
`python -m phasekv.train --config run.json --out DIR` trains from a run file (torchrun's form); `phasekv train`
takes run options as flags.
"""

from phasekv.corpus.mixture import MixtureConfig
from phasekv.train.checkpoint import latest_checkpoint, list_checkpoints
from phasekv.train.config import DataConfig, ModelSpec, OptimConfig, RunConfig, RunConfigError, load_run_config
from phasekv.train.log import read_log
from phasekv.train.loop import TrainResult, build_source, train
from phasekv.train.schedule import learning_rate

__all__ = [
    "DataConfig",
    "MixtureConfig",
    "ModelSpec",
    "OptimConfig",
    "RunConfig",
    "RunConfigError",
    "TrainResult",
    "build_source",
    "latest_checkpoint",
    "learning_rate",
    "list_checkpoints",
    "load_run_config",
    "read_log",
    "train",
]
