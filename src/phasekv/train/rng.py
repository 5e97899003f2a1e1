"""Seeding and capturing every random number generator the trainer touches (torch, CUDA, numpy, Python).

States are stored as tensors and plain lists so a checkpoint loads with `torch.load(weights_only=True)`.
"""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device


def capture_rng() -> dict:
    """The current states of all generators."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, state, gauss_next = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": [kind, keys.tolist(), pos, has_gauss, gauss],
        "python": [version, list(state), gauss_next],
    }


def restore_rng(state: dict) -> None:
    """Restore states captured by `capture_rng` (CUDA states only where CUDA is available)."""
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    version, py_state, gauss_next = state["python"]
    random.setstate((version, tuple(py_state), gauss_next))
