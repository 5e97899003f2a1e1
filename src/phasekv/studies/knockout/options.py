"""The knockout map's options, the one place their defaults live (`phasekv knockout` and `phasekv.probe(model,
"knockout")` read them); torch-free, so a command's options can read them without loading a model."""

from __future__ import annotations

from dataclasses import dataclass

MODES = ("heads", "layers")


@dataclass(frozen=True)
class KnockoutOptions:
    """`mode` heads or layers; `calibration_mappings` mappings of the calibration split (N_cal is
    their distinct prompts); `n_query` positions replaced in layers mode; `stride` the fold
    (None: the model's compression stride, else modulus // 2)."""

    mode: str = "heads"
    calibration_mappings: int = 16
    n_query: int = 1
    batch_size: int = 16
    stride: int | None = None
