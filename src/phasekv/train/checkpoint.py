"""Training checkpoints: `run_dir/checkpoints/step_XXXXXX/` written atomically.

A checkpoint directory holds the model (`config.json` + `model.safetensors`, via
`phasekv.model.save_checkpoint`, so `load_checkpoint` reads it directly) and `trainer.pt` (optimiser
state, schedule step, RNG states, data position, metrics). Everything is written into a hidden
temporary directory beside it and renamed into place in one `os.rename`, so a kill at any moment
leaves either the complete checkpoint or none; `latest_checkpoint` ignores hidden and incomplete
directories, and `remove_partial` deletes the leftovers of a killed save. A finished run also has
`checkpoints/final`, a relative symbolic link to its last checkpoint (`mark_final`), so commands and
examples can name a run's trained model without knowing its step count.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

import torch

from phasekv.files import check_space, disk_errors
from phasekv.model.io import CONFIG_FILE, WEIGHTS_FILE, save_checkpoint

CHECKPOINT_DIR = "checkpoints"
TRAINER_FILE = "trainer.pt"
REQUIRED = (CONFIG_FILE, WEIGHTS_FILE, TRAINER_FILE)
_NAME = re.compile(r"^step_(\d{6,})$")
_TMP_PREFIX = ".tmp-"
FINAL_LINK = "final"


def checkpoint_name(step: int) -> str:
    return f"step_{step:06d}"


def list_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """Complete checkpoints of a run as (step, path), by step."""
    root = Path(run_dir) / CHECKPOINT_DIR
    if not root.is_dir():
        return []
    found = []
    for path in root.iterdir():
        match = _NAME.match(path.name)
        if match and path.is_dir() and all((path / f).is_file() for f in REQUIRED):
            found.append((int(match.group(1)), path))
    return sorted(found)


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The complete checkpoint with the highest step, or None."""
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


def remove_partial(run_dir: str | Path) -> None:
    """Delete temporary directories left by saves that were killed."""
    root = Path(run_dir) / CHECKPOINT_DIR
    if root.is_dir():
        for path in root.glob(f"{_TMP_PREFIX}*"):
            if path.is_symlink():  # a `final` link that was not renamed into place
                path.unlink()
            else:
                shutil.rmtree(path, ignore_errors=True)


def save_training_checkpoint(
    run_dir: str | Path, step: int, model, trainer_state: dict, extra: dict | None = None, keep: int = 0
) -> Path:
    """Write checkpoint `step` of `model` (a PhaseKVModel) with `trainer_state`; `extra` goes into
    config.json's "extra" (the trainer stores the step, the run config and the data description).
    Keep the newest `keep` checkpoints (0: all). Raises FileExistsError if that step was already saved."""
    root = Path(run_dir) / CHECKPOINT_DIR
    root.mkdir(parents=True, exist_ok=True)
    final = root / checkpoint_name(step)
    if final.exists():
        raise FileExistsError(f"checkpoint {final} already exists")
    # safetensors and torch.save report a full disk as their own errors: the space is checked before and after
    size = _tensor_bytes(model.state_dict()) + _tensor_bytes(trainer_state)
    check_space(root, size, f"checkpoint {final}")
    tmp = Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{final.name}-", dir=root))
    try:
        with disk_errors(final):
            save_checkpoint(model, tmp, extra=extra or {"step": step})
            torch.save(trainer_state, tmp / TRAINER_FILE)
            os.rename(tmp, final)
    except BaseException as err:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(err, Exception) and not isinstance(err, OSError):
            check_space(root, size, f"checkpoint {final}")  # the disk filled while writing: say so, in one line
        raise
    if keep:
        for _, old in list_checkpoints(run_dir)[:-keep]:
            shutil.rmtree(old)
    return final


def _tensor_bytes(value) -> int:
    """The bytes of the tensors in `value` (nested dicts, lists and tuples)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(_tensor_bytes(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(_tensor_bytes(v) for v in value)
    return 0


def mark_final(run_dir: str | Path, checkpoint: str | Path) -> Path:
    """Point `run_dir/checkpoints/final` at `checkpoint` (one of that run's checkpoints) by a relative
    symbolic link, replaced atomically (a link made beside it, then renamed over it); returns the link."""
    root = Path(run_dir) / CHECKPOINT_DIR
    link = root / FINAL_LINK
    tmp = root / f"{_TMP_PREFIX}{FINAL_LINK}-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    os.symlink(Path(checkpoint).name, tmp)
    os.replace(tmp, link)
    return link


def load_trainer_state(checkpoint: str | Path) -> dict:
    """The trainer state of a checkpoint directory (tensors on the CPU)."""
    return torch.load(Path(checkpoint) / TRAINER_FILE, map_location="cpu", weights_only=True)
