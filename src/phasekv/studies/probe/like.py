"""Re-measure a result: the probe options a result recorded (`--like RUN_OR_RESULT` of `phasekv eval PROBE`
and `phasekv.probe(..., like=...)`), and the command that re-measures a result (what tables print).

A source is a result file of `phasekv eval PROBE` (or of `phasekv audit`, `phasekv reproduce`), a profile run
folder (`runs/PROFILE/runs/NAME`, whose probe result the profile wrote to `runs/PROFILE/results/NAME.json`) or a
folder holding `PROBE.json` (an audit's). The options are those the run asked for
(`requested_options`, or a profile's `lookup_options`; files written before either hold only the resolved ones,
which give the same prompts), with the stride when it was an option and the number of bootstrap resamples.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from . import registry
from .result import ProbeResult


@dataclass(frozen=True)
class Recorded:
    """What a result says about how it was measured: the option fields of its probe, the stride when it was
    given as an option (else None), the bootstrap resamples, the model folder it scored (None if unknown) and
    the result file read."""

    options: dict
    stride: int | None
    n_resamples: int | None
    model: str | None
    path: Path


def result_path(source: str | Path, probe: str) -> Path:
    """The result file `source` names (see the module docstring); FileNotFoundError when there is none."""
    path = Path(source)
    if path.is_file():
        return path
    if not path.is_dir():
        raise FileNotFoundError(f"--like {source}: no such file or folder")
    candidates = [path.parent.parent / "results" / f"{path.name}.json", path / f"{probe}.json"]
    found = next((c for c in candidates if c.is_file()), None)
    if found is None:
        raise FileNotFoundError(
            f"--like {source}: no {probe} result for it (looked for {' and '.join(map(str, candidates))})"
        )
    return found


def recorded(source: str | Path, probe: str) -> Recorded:
    """The measurement `source` records, for re-running `probe` (see `Recorded`); ValueError when it is a result
    of another probe."""
    if probe not in registry.names():
        raise ValueError(f"--like works with {sorted(registry.names())}, not {probe!r}")
    path = result_path(source, probe)
    typed = ProbeResult.load(path)
    if typed.probe != probe:
        raise ValueError(f"--like {source}: {path} is a {typed.probe} result, not a {probe} one")
    asked = typed.extra("requested_options") or typed.extra("lookup_options") or typed.options
    known = registry.get(probe).option_fields()
    options = {k: tuple(v) if isinstance(v, list) else v for k, v in asked.items() if k in known}
    stride = typed.stride.value if typed.stride.source == "option" else None
    model = typed.extra("checkpoint") or typed.model.get("path")
    return Recorded(options, stride, typed.residue_summary.bootstrap_resamples, model, path)


def eval_command(model: dict, probe: str, like: str | Path, model_args: str | None = None) -> str:
    """The `phasekv eval` command that re-measures the result at `like` on the model its record `model` names
    (a local folder with its press, or a served model); `model_args` replaces how the model is named."""
    if model_args is None:
        if model.get("kind") == "endpoint":
            model_args = (
                f"--endpoint {shlex.quote(str(model['endpoint']))} --served-model {shlex.quote(model['served_model'])}"
                f" --tokenizer {shlex.quote(str(model['tokenizer']))}"
            )
        else:
            model_args = shlex.quote(str(model.get("path", "MODEL")))
            press = model.get("press")
            if press:
                model_args += f" --press {shlex.quote(str(press['spec'] if isinstance(press, dict) else press))}"
    return f"phasekv eval {probe} {model_args} --like {shlex.quote(str(like))}"


def remeasure_list(rows) -> str:
    """The lines under a table that name, for every row, the command that re-measures it: `rows` are (row
    label, command or None: a row no command reproduces)."""
    lines = ["\nRe-measure a row (the probe options are the row's result file's):"]
    for label, command in rows:
        lines.append(f"- {label}: " + (f"`{command}`" if command else "no command (made inside the profile run)"))
    return "\n".join(lines)
