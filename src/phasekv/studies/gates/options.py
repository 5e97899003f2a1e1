"""The gate-concentration run's options, the one place their defaults live (`phasekv gates` and the reproduction's
gates stage read them); torch-free, so a command's options can read them without loading a model."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GatesOptions:
    """Prompts per forward pass of a gate-concentration run (and of its trajectory over checkpoints)."""

    batch_size: int = 16
