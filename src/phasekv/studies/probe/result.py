"""The result of a residue probe (`phasekv eval PROBE`, `run_probe`; the probes are `registry`'s) as a typed,
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

import math
from typing import Any

from pydantic import Field, field_validator, model_validator

from phasekv.results.base import (
    TOLERANCE,
    FieldProblems,
    Typed,
    TypedResult,
    model_label,
    outside,
    range_problems,
)
from phasekv.stats.summary import ResidueSummary
from phasekv.stats.verdict import AT_CHANCE, NOT_TESTABLE

from . import registry

PROBE_SCHEMA = "phasekv.eval/1"
SCHEMA_VERSIONS = (1,)


class StrideChoice(Typed):
    """The stride S of the period check and where it came from (model config, press, option, default)."""

    value: int | None
    source: str


class ProbeResult(TypedResult):
    """The result of a registered residue probe (see `phasekv.results.record` for the envelope's fields)."""

    schema_id: str = Field(alias="schema", pattern=r"^phasekv\.eval/\d+$")
    probe: str
    model: dict[str, Any]
    options: dict[str, Any]
    stride: StrideChoice
    residue_summary: ResidueSummary = Field(alias="summary")  # the file's "summary"; `.summary` is the text
    controls: dict[str, Any]
    n_prompts: int
    protocol: str | None = None
    seed: int | None = None
    phase_test: dict[str, Any] | None = None
    period: dict[str, Any] | None = None  # `stats.stride.Period`: files written before it was recorded lack it
    wall_time_s: float | None = None

    schema_prefix = "phasekv.eval/"

    @classmethod
    def recognises(cls, data: dict) -> bool:
        return super().recognises(data) and data.get("probe") in registry.names()

    @field_validator("probe")
    @classmethod
    def _known(cls, probe: str) -> str:
        if probe not in registry.names():
            raise ValueError(f"{probe!r} is no probe this phasekv knows ({', '.join(registry.names())})")
        return probe

    @model_validator(mode="after")
    def _check(self) -> ProbeResult:
        if self.schema_version not in SCHEMA_VERSIONS:
            raise ValueError(f"schema {self.schema_id!r}: this phasekv reads versions {SCHEMA_VERSIONS}")
        s = self.residue_summary
        n = len(s.accuracy)
        if n < 2 or len(s.ci_low) != n or len(s.ci_high) != n or n != s.modulus:
            raise ValueError(
                "summary: accuracy, ci_low and ci_high must be lists of one length >= 2, equal to summary.modulus"
            )
        problems = list(self._value_problems())
        if problems:
            raise FieldProblems(problems)
        return self

    def _value_problems(self):
        """Values out of their range, or statistics that disagree with the numbers they are computed from: a
        hand-edited or corrupted file must not be drawn as a measurement."""
        s = self.residue_summary
        if self.n_prompts < 0:
            yield "n_prompts", outside(self.n_prompts, 0, math.inf)
        for name in ("accuracy", "ci_low", "ci_high", "mean", "worst", "best"):
            yield from range_problems(f"summary.{name}", getattr(s, name), 0.0, 1.0)
        for name in ("counts", "successes"):
            yield from range_problems(f"summary.{name}", getattr(s, name), 0.0, math.inf)
        for name in ("gap_points", "period_difference_points"):
            yield from range_problems(f"summary.{name}", getattr(s, name), 0.0, 100.0)
        yield from range_problems("summary.uniformity.p_value", s.uniformity.p_value, 0.0, 1.0)
        for i, (low, high) in enumerate(zip(s.ci_low, s.ci_high, strict=True)):
            if low > high + TOLERANCE:
                yield f"summary.ci_low[{i}]", f"{low!r} is above ci_high[{i}] = {high!r}"
        if len(s.counts) == len(s.successes) == len(s.accuracy):
            for i, (k, n, a) in enumerate(zip(s.successes, s.counts, s.accuracy, strict=True)):
                if k > n:
                    yield f"summary.successes[{i}]", f"{k!r} is more than counts[{i}] = {n!r}"
                elif n > 0 and abs(k / n - a) > TOLERANCE:
                    yield f"summary.accuracy[{i}]", f"{a!r} is not successes / counts = {k / n:.6g}"
        else:
            yield "summary.counts", "counts, successes and accuracy must have one length"
        if all(0.0 <= a <= 1.0 for a in s.accuracy):
            yield from _agrees("summary.mean", s.mean, sum(s.accuracy) / len(s.accuracy), "the mean of accuracy")
            yield from _agrees("summary.worst", s.worst, min(s.accuracy), "the lowest accuracy")
            yield from _agrees("summary.best", s.best, max(s.accuracy), "the highest accuracy")
            gap = 100.0 * (max(s.accuracy) - min(s.accuracy))
            yield from _agrees("summary.gap_points", s.gap_points, gap, "100 (best - worst)", 100 * TOLERANCE)
        fold = s.fold or {}
        yield from range_problems("summary.fold.accuracy", fold.get("accuracy"), 0.0, 1.0)
        for name in ("counts", "successes"):
            yield from range_problems(f"summary.fold.{name}", fold.get(name), 0.0, math.inf)
        methods = s.stat_interval_methods or {}
        for name, interval in (s.stat_intervals or {}).items():
            # percentile intervals are quantiles of the statistic, so they share its range; basic intervals
            # (2 x estimate - quantile) can leave it and are not checked
            if methods.get(name) == "percentile":
                high = 1.0 if name in ("mean", "worst", "best") else 100.0
                yield from range_problems(f"summary.stat_intervals.{name}", interval, 0.0, high)
        yield from self._cell_problems()

    def _cell_problems(self):
        cells = self.extra("cell_accuracy")
        if cells is None:
            return
        yield from range_problems("cell_accuracy", cells, 0.0, 1.0)
        m = len(self.residue_summary.accuracy)
        if not cells or any(not isinstance(row, list) or len(row) != m for row in cells):
            yield "cell_accuracy", f"must be a non-empty list of rows of {m} cells (one per residue)"
            return
        for r in range(m):
            column = [row[r] for row in cells]
            if all(isinstance(c, int | float) and 0.0 <= c <= 1.0 for c in column):
                given = sum(column) / len(column)
                yield from _agrees(
                    f"summary.accuracy[{r}]", self.residue_summary.accuracy[r], given, "the mean of its cells"
                )

    @property
    def phase_verdict(self) -> dict[str, Any] | None:
        """`phase_test` as today's rule reads it (`stats.verdict`): a file written before the chance rule (no
        ``chance`` recorded) whose mean is not above guessing (`learned`) says "not judged: at chance", not the
        null verdict it was given. None for files written before the phase test."""
        test = self.phase_test
        if test is None or test.get("chance") is not None or self.learned() is not False:
            return test
        if test.get("verdict") in (NOT_TESTABLE, AT_CHANCE):
            return test
        return {**test, "verdict": AT_CHANCE}

    @property
    def verdict(self) -> str | None:
        """The phase verdict's wording (`phase_verdict`), None for files written before it."""
        return None if self.phase_verdict is None else self.phase_verdict.get("verdict")

    @property
    def summary(self) -> str:
        """The one-screen finding (`.residue_summary` is the typed residue summary): what was run, the mean, gap and
        phase verdict with its effect size, interval, p, minimum detectable effect and smooth trend."""
        from phasekv.stats.format import format_headline

        test = self.phase_test or {}
        distinct = (test.get("test") or {}).get("n_distinct_prompts")
        options = self.options
        template = f"{options['template']} template, " if "template" in options else ""
        heading = (
            f"{self.probe} on {self.model_label}: {template}{self.protocol or '-'} padding, {self.n_prompts} prompts"
            + (f" ({distinct} distinct)" if distinct is not None else "")
            + (f", {self.wall_time_s:.0f} s" if self.wall_time_s is not None else "")
        )
        period = "" if self.period is None else "\n" + self.period["reason"]
        return heading + period + "\n" + format_headline(self.residue_summary, self.phase_test)

    def __str__(self) -> str:
        return self.summary

    @property
    def model_label(self) -> str:
        """The scored model as a reader names it (`results.base.model_label`)."""
        return model_label(self.model)

    def figure(self, name: str | None = None) -> dict:
        """Accuracy by residue as the report draws it: a Vega-Lite spec (a dict), shown in a notebook by
        `altair.Chart.from_dict(spec)` or any Vega-Lite renderer."""
        from pathlib import Path

        from phasekv.charts.inputs import Inputs, Result
        from phasekv.studies.probe import figure

        label = name or self.model_label
        inputs = Inputs(Path("."), {"residues": [Result("residues", Path(label), self.to_dict(), label, self)]})
        return figure.spec(figure.section(inputs))

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
        intervals = self.residue_summary.stat_intervals or {}
        if "mean" not in intervals or not self.n_records:
            return None
        return intervals["mean"][0] > 2.0 / self.n_records


def _agrees(field: str, value: float, expected: float, what: str, tolerance: float = TOLERANCE):
    if not abs(value - expected) <= tolerance:
        yield field, f"{value!r} does not equal {what} ({expected:.6g})"


def learned(result: dict | ProbeResult) -> bool:
    """Whether a lookup result shows a model that learned retrieval at all (`ProbeResult.learned`): a model
    that has not learned the task says nothing about phase by being flat. `result`: a result dict or typed."""
    typed = result if isinstance(result, ProbeResult) else ProbeResult.from_dict(result)
    verdict = typed.learned()
    if verdict is None:
        raise ValueError("learned() needs a result with a bootstrap interval of the mean")
    return verdict
