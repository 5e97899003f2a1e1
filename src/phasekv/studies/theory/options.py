"""What the theory runs compute: Theorem 1's random starts, one Theorem 2 training and a Theorem 2 sweep; torch-free,
so a command's options can read them without loading a model."""

from __future__ import annotations

from dataclasses import dataclass, field

from phasekv.theory.config import GateTrainingConfig, Theorem1Config


@dataclass(frozen=True)
class TheoryOptions:
    """Theorem 1's config, Theorem 2's, and a sweep: `sweep` trained at every point of `sweep_grid` (field name:
    values) for every seed of `sweep_seeds`."""

    theorem1: Theorem1Config = field(default_factory=Theorem1Config)
    theorem2: GateTrainingConfig = field(default_factory=GateTrainingConfig)
    sweep: GateTrainingConfig = field(default_factory=GateTrainingConfig)
    sweep_grid: dict = field(default_factory=lambda: {"n_heads": [2, 3], "gamma": [4.0, 8.0], "beta": [4.0, 8.0]})
    sweep_seeds: tuple[int, ...] = (0,)


# `phasekv theory sweep`'s design: a quick grid, each point trained shorter and on smaller batches than one Theorem 2
# run (`TheoryOptions().sweep`); its grid names every parameter the command sweeps
QUICK_SWEEP = TheoryOptions(
    sweep=GateTrainingConfig(steps=600, batch_size=64),
    sweep_grid={
        "n_tokens": [64],
        "chunk_size": [4],
        "n_heads": [2, 3],
        "rho": [0.01],
        "gamma": [4.0, 8.0],
        "beta": [4.0, 8.0],
    },
)
