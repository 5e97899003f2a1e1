"""The Python entry to the probes: one call from a model (or its folder) to a typed result.

    import phasekv
    result = phasekv.probe("runs/quick/runs/w8s8-1kv-s42/checkpoints/final", "lookup", n_records=16,
                           n_mappings=32, held_out_seed=0)
    print(result)           # result.summary: the one-screen finding the CLI prints
    result.verdict          # "phase-sensitive"
    result.phase_test["effect_points"], result.phase_test["mde"]["points"]
    result.figure()         # the report's chart, a Vega-Lite spec
    result.to_json()        # the JSON the CLI writes (`type(result).from_dict(json.loads(...))` reads it back)

One call for every probe, `phasekv.probe(model, PROBE, **options)`, each returning its study's typed result:

* the residue probes ("lookup", "needle" and every other in `studies.probe.registry`): `ProbeResult`;
  options: the fields of the probe's options class (`LookupOptions`, `NeedleOptions`, ...) and the run's
  `stride`, `n_resamples`, `grid_shift`, `min_effect`, `max_mde` (as `phasekv eval PROBE`). `like=`
  re-measures an earlier result with its recorded options (`phasekv.probe(like="runs/quick/runs/w8s8-1kv-s42")`).
* "flip": `FlipResult`; options: the fields of `FlipOptions` (as `phasekv eval flip`). Its verdict is the
  period its rankings follow ("period 8 detected" or "no period detected").
* "knockout": `KnockoutResult`; options: the fields of the lookup prompts (`LookupOptions`, starting from the
  analyses' design `ANALYSIS_LOOKUP`, as `phasekv knockout`) and of `KnockoutOptions` (`mode="layers"` for a
  Hugging Face model). A knockout map has no verdict (`verdict` is None).

`model` is a folder (a phasekv checkpoint or a local Hugging Face causal LM), a `PhaseKVModel`, or any scorer
(`phasekv.scoring.Scorer`). Unknown options, and option values no run can use, are refused (with the list of
the known options) before any model is loaded. `progress=True` shows the command's progress.

    audit = phasekv.audit("models/smollm2-135m", budget="10m")
    print(audit)            # audit.summary: the one-screen verdict `phasekv audit` prints
    audit.probe_result("lookup").figure()   # the residue figure, a Vega-Lite spec
"""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

OTHER_PROBES = ("flip", "knockout")  # besides the residue probes of `studies.probe.registry`
RUN_KEYWORDS = (
    "stride",
    "n_resamples",
    "grid_shift",
    "min_effect",
    "max_mde",
)  # a residue probe's run's (`run_probe`), besides options


def probes() -> tuple[str, ...]:
    """Every probe `probe` runs: the registered residue probes, then the flip and the knockout."""
    from .studies.probe.registry import names

    return (*names(), *OTHER_PROBES)


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


def _option_types(probe: str) -> tuple[type, ...]:
    if probe == "flip":
        from .studies.flip.options import FlipOptions

        return (FlipOptions,)
    if probe == "knockout":
        from .studies.knockout.options import KnockoutOptions
        from .tasks.lookup import LookupOptions

        return LookupOptions, KnockoutOptions
    from .studies.probe.registry import get

    return (get(probe).options,)


def _split(probe: str, options: dict) -> list[dict]:
    """`options` as the keywords of each of the probe's option types (and, last for a residue probe, of its run);
    TypeError naming the known options when any is unknown."""
    types = _option_types(probe)
    groups = [{f.name for f in fields(t)} for t in types]
    if probe not in OTHER_PROBES:
        groups.append(set(RUN_KEYWORDS))
    known = set().union(*groups)
    unknown = sorted(set(options) - known)
    if unknown:
        sources = " and ".join(t.__name__ for t in types) + (" and the run's" if len(groups) > len(types) else "")
        raise TypeError(f"unknown {probe} option(s) {unknown}; {probe} takes {sorted(known)} (the fields of {sources})")
    return [{k: v for k, v in options.items() if k in group} for group in groups]


def probe(model=None, probe: str = "lookup", *, like=None, progress: bool = False, **options):
    """Run one probe and return its typed result (see the module docstring). `like` (residue probes): a result
    file, a profile run folder or an audit folder whose recorded options (stride, resamples, and the model when
    `model` is None) are used, the keywords given here overriding them (`studies.probe.like`)."""
    if probe not in probes():
        raise ValueError(f"probe must be one of {probes()}, got {probe!r}")
    parts = _split(probe, options)
    if probe == "flip":
        return _flip(model, parts[0], like, progress)
    if probe == "knockout":
        return _knockout(model, *parts, like, progress)
    return _unit_probe(model, probe, *parts, like, progress)


def _needs(model, like, probe: str) -> None:
    if like is not None:
        from .studies.probe.registry import names

        raise TypeError(f"like= re-measures the results of the residue probes ({', '.join(names())}), not {probe} ones")
    if model is None:
        raise TypeError("probe() needs a model")


def _unit_probe(model, probe: str, options: dict, run_options: dict, like, progress: bool):
    from .studies.probe.like import recorded
    from .studies.probe.result import ProbeResult
    from .studies.probe.run import run_probe

    if like is not None:
        found = recorded(like, probe)
        options = {**found.options, **options}
        given = {"stride": found.stride, "n_resamples": found.n_resamples}
        run_options = {**{k: v for k, v in given.items() if v is not None}, **run_options}
        model = found.model if model is None else model
    if model is None:
        raise TypeError("probe() needs a model (or like= a result that names the model it scored)")
    (option_type,) = _option_types(probe)
    probe_options = option_type(**options)
    return ProbeResult.from_dict(run_probe(probe, _scorer(model), probe_options, progress=progress, **run_options))


def _flip(model, options: dict, like, progress: bool):
    from .studies.flip.options import FlipOptions
    from .studies.flip.result import FlipResult
    from .studies.flip.run import check_options, run_flip

    _needs(model, like, "flip")
    flip_options = FlipOptions(**options)
    check_options(flip_options)
    return FlipResult.from_dict(run_flip(_scorer(model), flip_options, progress=progress))


def _knockout(model, lookup: dict, options: dict, like, progress: bool):
    from .internals.design import ANALYSIS_LOOKUP
    from .studies.knockout.options import KnockoutOptions
    from .studies.knockout.result import KnockoutResult
    from .studies.knockout.run import check_options, run_knockout

    _needs(model, like, "knockout")
    knockout_options = KnockoutOptions(**options)
    check_options(knockout_options)
    result = run_knockout(_scorer(model), replace(ANALYSIS_LOOKUP, **lookup), knockout_options, progress)
    return KnockoutResult.from_dict(result)


def audit(model, *, out=None, budget=None, mde: float | None = None, progress: bool = False, **options):
    """Audit a model (a folder, a `PhaseKVModel` or a scorer) as `phasekv audit` does and return the typed
    `AuditResult` (`.summary`, `.verdict`, `.probe_result("lookup")`, `.figure()`, `.to_json()`). `budget`:
    seconds or '10m' (default 10 minutes unless `mde` alone is given); `mde`: the largest minimum detectable
    effect (points, default 20) that backs a null, which sizes the design when no budget is given; `anyway=True`
    scores the design a budget buys even when it does not reach `mde` (else `AuditError` before scoring);
    `out`: the folder for the results and the report (default runs/audit/<folder name, or "model">); `options`:
    the other `AuditOptions` fields. Bad options are refused before any model is loaded."""
    import time

    from .auditing.run import run_audit
    from .studies.audit.options import AuditOptions, parse_duration

    started = time.perf_counter()
    audit_options = AuditOptions(budget_s=None if budget is None else parse_duration(budget), mde_points=mde, **options)
    if out is None:
        out = Path("runs/audit") / (Path(model).resolve().name if isinstance(model, str | Path) else "model")
    return run_audit(_scorer(model), audit_options, out, started=started, echo=lambda _: None, progress=progress)
