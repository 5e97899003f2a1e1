"""The result of a residue probe (`phasekv eval lookup|needle`, `run_lookup`/`run_needle`) as a typed,
validated object.

`ProbeResult.load(path)` reads a result file and checks the fields every reader relies on (schema, probe,
model record, options, stride, the residue summary with its intervals and uniformity test, controls);
anything else the file holds (per-prompt records, phase test, position statistics, training info) is kept
as it is and reachable with `extra(...)`. A missing or mistyped field raises `ResultFileError` naming the
file and the field, e.g. ``lookup.json: summary.ci_low: Field required``.

Versions: ``schema`` is "phasekv.eval/<version>". Version 1 is the only one written so far; fields added
to it later (e.g. ``summary.stat_intervals``, ``phase_test``, ``cell_accuracy``) are optional here, so the
files of earlier runs load as they are.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from phasekv.results.base import Typed, TypedResult
from phasekv.stats.summary import ResidueSummary

PROBE_SCHEMA = "phasekv.eval/1"
SCHEMA_VERSIONS = (1,)


class StrideChoice(Typed):
    """The stride S of the period check and where it came from (model config, press, option, default)."""

    value: int | None
    source: str


class ProbeResult(TypedResult):
    """A lookup or needle result (see `phasekv.evaluate.record` for the envelope's fields)."""

    schema_id: str = Field(alias="schema", pattern=r"^phasekv\.eval/\d+$")
    probe: Literal["lookup", "needle"]
    model: dict[str, Any]
    options: dict[str, Any]
    stride: StrideChoice
    summary: ResidueSummary
    controls: dict[str, Any]
    n_prompts: int
    protocol: str | None = None
    seed: int | None = None
    phase_test: dict[str, Any] | None = None
    wall_time_s: float | None = None

    schema_prefix = "phasekv.eval/"
    probes: ClassVar[tuple[str, ...]] = ("lookup", "needle")

    @classmethod
    def recognises(cls, data: dict) -> bool:
        return super().recognises(data) and data.get("probe") in cls.probes

    @model_validator(mode="after")
    def _check(self) -> ProbeResult:
        if self.schema_version not in SCHEMA_VERSIONS:
            raise ValueError(f"schema {self.schema_id!r}: this phasekv reads versions {SCHEMA_VERSIONS}")
        s = self.summary
        n = len(s.accuracy)
        if n < 2 or len(s.ci_low) != n or len(s.ci_high) != n or n != s.modulus:
            raise ValueError(
                "summary: accuracy, ci_low and ci_high must be lists of one length >= 2, equal to summary.modulus"
            )
        return self

    @property
    def schema_version(self) -> int:
        return int(self.schema_id.rsplit("/", 1)[1])

    @property
    def compressed(self) -> bool:
        """Whether the scored model compressed its KV cache: a phasekv compressor, a press or pooling (recorded
        in the model record), or, in files written before the model record said so, a stride from the model."""
        if self.model.get("press") or self.model.get("compression_stride") is not None:
            return True
        if "compression_stride" in self.model:
            return False
        return self.stride.source.startswith("model")

    @property
    def n_records(self) -> int | None:
        return self.options.get("n_records")

    def learned(self) -> bool | None:
        """True when the lower end of the mean accuracy's 95% interval exceeds twice the name-guessing level
        2 / records; None when that cannot be judged (no bootstrap interval of the mean)."""
        intervals = self.summary.stat_intervals or {}
        if "mean" not in intervals or not self.n_records:
            return None
        return intervals["mean"][0] > 2.0 / self.n_records


def learned(result: dict | ProbeResult) -> bool:
    """Whether a lookup result shows a model that learned retrieval at all (`ProbeResult.learned`): a model
    that has not learned the task says nothing about phase by being flat. `result`: a result dict or typed."""
    typed = result if isinstance(result, ProbeResult) else ProbeResult.from_dict(result)
    verdict = typed.learned()
    if verdict is None:
        raise ValueError("learned() needs a result with a bootstrap interval of the mean")
    return verdict
