"""How large a profile's post-training analyses are (`stages`): sized so that the profile keeps its time budget."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TheorySizes:
    """The theory runs: Theorem 1's random starts, one Theorem 2 training and a sweep over heads and scales."""

    theorem1_starts: int = 16
    theorem1_steps: int = 1000
    theorem2_steps: int = 1500
    theorem2_batch: int = 256
    sweep_grid: dict = field(default_factory=lambda: {"n_heads": [2, 3], "gamma": [4.0, 8.0], "beta": [4.0, 8.0]})
    sweep_seeds: tuple[int, ...] = (0,)
    sweep_steps: int = 400
    sweep_batch: int = 64


@dataclass(frozen=True)
class AnalysisSizes:
    """How large each post-training analysis is (sized so that a profile keeps its time budget).

    Knockout, cycling and gate metrics use the profile's lookup prompts grouped by target position mod
    `modulus` (8: the strides 8 and 4 divide it) instead of 24: the exact equal-moment design needs
    modulus^2 prompts per residue, 512 in all at 8 against 13,824 at 24. The flip probe shifts one
    fixed lookup query through `flip_lengths` filler lengths of each family."""

    modulus: int = 8
    knockout_mappings: int = 8
    calibration_mappings: int = 8
    cycle_mappings: int = 16
    cycle_deltas: tuple[int, ...] = (-3, -2, -1, 0, 1, 2, 3)
    cycle_resamples: int = 1000
    cycle_preset: str = "w8s8-1kv"  # gate cycling needs W = S: the runs of this preset are cycled
    gate_mappings: int = 2
    flip_lengths: int = 24
    flip_families: tuple[str, ...] = ("pad", "dots", "prose")
    flip_permutations: int = 1000
    theory: TheorySizes = field(default_factory=TheorySizes)
