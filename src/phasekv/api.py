"""The Python entry to the probes: one call from a model (or its folder) to a typed result.

    import phasekv
    result = phasekv.probe("runs/quick/runs/w8s8-1kv-s42/checkpoints/final", "lookup", n_records=16,
                           n_mappings=32, held_out_seed=0)
    result.verdict          # "phase-sensitive"
    result.phase_test["effect_points"], result.phase_test["mde"]["points"]
    result.to_dict()        # the JSON the CLI writes

`model` is a folder (a phasekv checkpoint or a local Hugging Face causal LM), a `PhaseKVModel`, or any scorer
(`phasekv.scoring.Scorer`); the options are those of `LookupOptions` / `NeedleOptions`. `like=` re-measures an
earlier result with its recorded options (`phasekv.probe(like="runs/quick/runs/w8s8-1kv-s42")`).

    audit = phasekv.audit("models/smollm2-135m", budget="10m")
    print(audit)            # the one-screen verdict `phasekv audit` prints
    audit.probe_result("lookup").figure()   # the residue figure, a Vega-Lite spec
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
    model=None,
    probe: str = "lookup",
    *,
    like=None,
    stride: int | None = None,
    n_resamples: int | None = None,
    grid_shift: bool = False,
    min_effect: float = 5.0,
    progress: bool = False,
    **options,
):
    """Run the lookup or needle probe and return its typed `ProbeResult` (see the module docstring). `like`: a
    result file, a profile run folder or an audit folder whose recorded options (stride, resamples, and the model
    when `model` is None) are used, the keywords given here overriding them (`studies.probe.like`). Unknown
    options are refused with the list of the known ones, before any model is loaded."""
    from .evaluate import run_lookup, run_needle
    from .studies.probe.like import OPTION_TYPES, recorded
    from .studies.probe.result import ProbeResult

    if probe not in PROBES:
        raise ValueError(f"probe must be one of {PROBES}, got {probe!r}")
    option_type = OPTION_TYPES[probe]
    known = {f.name for f in fields(option_type)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"unknown {probe} option(s) {unknown}; {option_type.__name__} takes {sorted(known)}")
    if like is not None:
        found = recorded(like, probe)
        options = {**found.options, **options}
        stride = found.stride if stride is None else stride
        n_resamples = n_resamples or found.n_resamples
        model = found.model if model is None else model
    if model is None:
        raise TypeError("probe() needs a model (or like= a result that names the model it scored)")
    run = run_lookup if probe == "lookup" else run_needle
    result = run(
        _scorer(model),
        option_type(**options),
        stride=stride,
        n_resamples=n_resamples or 2000,
        grid_shift=grid_shift,
        min_effect=min_effect,
        progress=progress,
    )
    return ProbeResult.from_dict(result)


def audit(model, *, out=None, budget="10m", mde: float | None = None, progress: bool = False, **options):
    """Audit a model (a folder, a `PhaseKVModel` or a scorer) as `phasekv audit` does and return the typed
    `AuditResult` (`.summary_text`, `.verdict`, `.probe_result("lookup")`, `.figure()`, `.to_json()`). `budget`:
    seconds or '10m' (ignored when `mde`, a target minimum detectable effect in points, is given); `out`: the
    folder for the results and the report (default runs/audit/<folder name, or "model">); `options`: the other
    `AuditOptions` fields. Bad options are refused before any model is loaded."""
    import time

    from .studies.audit.options import AuditOptions, parse_duration
    from .studies.audit.run import run_audit

    started = time.perf_counter()
    audit_options = AuditOptions(
        budget_s=None if mde is not None else parse_duration(budget), mde_points=mde, **options
    )
    if out is None:
        out = Path("runs/audit") / (Path(model).resolve().name if isinstance(model, str | Path) else "model")
    return run_audit(_scorer(model), audit_options, out, started=started, echo=lambda _: None, progress=progress)
