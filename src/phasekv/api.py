"""The Python entry to the probes: one call from a model (or its folder) to a typed result.

    import phasekv
    result = phasekv.probe("runs/quick/runs/w8s8-1kv-s42/checkpoints/final", "lookup", n_records=16,
                           n_mappings=32, held_out_seed=0)
    result.verdict          # "phase-sensitive"
    result.phase_test["effect_points"], result.phase_test["mde"]["points"]
    result.to_dict()        # the JSON the CLI writes

`model` is a folder (a phasekv checkpoint or a local Hugging Face causal LM), a `PhaseKVModel`, or any scorer
(`phasekv.scoring.Scorer`); the options are those of `LookupOptions` / `NeedleOptions`.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

PROBES = ("lookup", "needle")


def _scorer(model):
    from .model import PhaseKVModel
    from .scoring.load import load_scorer
    from .scoring.phasekv_scorer import PhaseKVScorer

    if isinstance(model, str | Path):
        return load_scorer(model)
    if isinstance(model, PhaseKVModel):
        return PhaseKVScorer(model)
    if hasattr(model, "logprobs") and hasattr(model, "tokenizer"):
        return model
    raise TypeError(f"probe() takes a model folder, a PhaseKVModel or a scorer, got {type(model).__name__}")


def probe(
    model,
    probe: str = "lookup",
    *,
    stride: int | None = None,
    n_resamples: int = 2000,
    grid_shift: bool = False,
    progress: bool = False,
    **options,
):
    """Run the lookup or needle probe and return its typed `ProbeResult` (see the module docstring). Unknown
    options are refused with the list of the known ones, before any model is loaded."""
    from .evaluate import run_lookup, run_needle
    from .studies.probe.result import ProbeResult
    from .tasks.lookup import LookupOptions
    from .tasks.needle import NeedleOptions

    if probe not in PROBES:
        raise ValueError(f"probe must be one of {PROBES}, got {probe!r}")
    option_type = LookupOptions if probe == "lookup" else NeedleOptions
    known = {f.name for f in fields(option_type)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"unknown {probe} option(s) {unknown}; {option_type.__name__} takes {sorted(known)}")
    run = run_lookup if probe == "lookup" else run_needle
    result = run(
        _scorer(model),
        option_type(**options),
        stride=stride,
        n_resamples=n_resamples,
        progress=progress,
        grid_shift=grid_shift,
    )
    return ProbeResult.from_dict(result)
