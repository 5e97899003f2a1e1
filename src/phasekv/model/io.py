"""Save and load checkpoints: a directory with config.json and model.safetensors.

Files are written to a temporary name and renamed into place, so an interrupted save never leaves a
half-written file under the real name. Loading checks everything and names the file and the problem.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ..config import ConfigError, ModelConfig
from ..files import write_atomic
from ..version import __version__
from .transformer import PhaseKVModel

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
FORMAT = "phasekv"


class CheckpointError(ValueError):
    """A checkpoint directory is missing, unreadable, or does not fit its config."""


def save_checkpoint(model, directory: str | Path, extra: dict | None = None) -> Path:
    """Write `model` (a PhaseKVModel) to `directory`; `extra` is stored in config.json under "extra"."""
    directory = Path(directory)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    if model.config.tie_embeddings:
        state.pop("lm_head.weight", None)  # the same tensor as embed_tokens.weight
    meta = {"format": FORMAT, "phasekv_version": __version__, "config": model.config.to_dict(), "extra": extra or {}}
    write_atomic(directory / WEIGHTS_FILE, lambda tmp: save_file(state, tmp, metadata={"format": "pt"}))
    write_atomic(directory / CONFIG_FILE, lambda tmp: Path(tmp).write_text(json.dumps(meta, indent=2) + "\n"))
    return directory


def read_config_json(
    directory: str | Path, error: type[ValueError], kind: str, missing: str, unreadable: str = ""
) -> tuple[Path, object]:
    """(path, parsed contents) of a model directory's config.json; `error` names what is wrong: no `kind`
    directory, no file (`missing` says what the directory should be), or no JSON (`unreadable` adds a hint)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise error(f"{kind} directory {directory} does not exist")
    path = directory / CONFIG_FILE
    if not path.is_file():
        raise error(f"{path} is missing: {missing}")
    try:
        return path, json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise error(f"{path} is not valid JSON ({err}){unreadable}") from err


def read_config(directory: str | Path) -> tuple[ModelConfig, dict]:
    """The ModelConfig and the "extra" dict stored in a checkpoint directory."""
    path, meta = read_config_json(
        directory,
        CheckpointError,
        "checkpoint",
        "save checkpoints with phasekv (save_checkpoint / save_pretrained)",
        "; the file may be truncated",
    )
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        hint = (
            " It looks like a Hugging Face config: use an HF model path with the HF scorer."
            if "model_type" in meta
            else ""
        )
        raise CheckpointError(f'{path} is not a phasekv config (no "format": "{FORMAT}").{hint}')
    try:
        return ModelConfig.from_dict(meta["config"]), meta.get("extra", {})
    except (ConfigError, TypeError, KeyError) as err:
        raise CheckpointError(f"{path}: invalid model config: {err}") from err


def load_checkpoint(directory: str | Path, map_location: str | torch.device = "cpu"):
    """Load a PhaseKVModel saved with `save_checkpoint`."""

    directory = Path(directory)
    cfg, _ = read_config(directory)
    path = directory / WEIGHTS_FILE
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: the checkpoint has a config but no weights")
    try:
        state = load_file(str(path), device=str(map_location))
    except (SafetensorError, OSError) as err:
        raise CheckpointError(f"{path} is unreadable ({err}); it may be truncated or not a safetensors file") from err
    model = PhaseKVModel(cfg)
    expected = {k: v.shape for k, v in model.state_dict().items()}
    if cfg.tie_embeddings:
        expected.pop("lm_head.weight")
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = [
        f"{k}: file {tuple(state[k].shape)} vs config {tuple(s)}"
        for k, s in expected.items()
        if k in state and state[k].shape != s
    ]
    if missing or unexpected or wrong:
        problems = []
        if missing:
            problems.append(f"missing tensors {missing[:5]}{' ...' if len(missing) > 5 else ''}")
        if unexpected:
            problems.append(f"unexpected tensors {unexpected[:5]}{' ...' if len(unexpected) > 5 else ''}")
        if wrong:
            problems.append("shape mismatches " + "; ".join(wrong[:5]))
        raise CheckpointError(f"{path} does not match {directory / CONFIG_FILE}: " + ", ".join(problems))
    model.load_state_dict(state, strict=False)
    return model
