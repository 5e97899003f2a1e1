"""The conformance result format (`phasekv conformance`): per execution mode, errors against the reference's
parallel forward, overall and by phase (position mod S). Statistics over no finite value are `None`."""

from __future__ import annotations

from typing import Literal

from phasekv.results.base import Count, NonNegative, Proportion, Typed, TypedResult


class Errors(Typed):
    """The errors of a set of positions against the reference."""

    positions: Count
    max_abs_delta: NonNegative | None
    mean_abs_delta: NonNegative | None
    max_kl: NonNegative | None
    mean_kl: NonNegative | None
    top1_agreement: Proportion | None
    beyond_tolerance: Count  # non-finite positions included
    non_finite: Count = 0  # positions where an output is NaN or +inf (results written before the count have none)


class PhaseErrors(Errors):
    phase: Count


class Concentration(Typed):
    peak_phase: int | None
    phases: list[int]
    boundary_phase: bool
    from_first_window: bool
    text: str


class RatioErrors(Typed):
    """The errors by position mod one compression ratio of the layers (`by_phase` is by the run's S)."""

    ratio: int
    first_failure_phase: Count | None
    by_phase: list[PhaseErrors]


class ModeErrors(Errors):
    first_failure: Count | None
    first_failure_phase: Count | None
    conforms: bool
    by_phase: list[PhaseErrors]
    by_ratio: list[RatioErrors] = []  # one per compression ratio of the layers; none in results written before
    concentration: Concentration


class Comparison(Typed):
    """What the verdict rests on: an independent implementation, a reference the user gave, or the
    candidate's own parallel forward (a bug every mode shares is then invisible)."""

    against: Literal["independent", "given", "self"]
    text: str


class StrideSource(Typed):
    value: int
    source: str


class ConformanceResult(TypedResult):
    """`phasekv conformance`: every mode of a candidate against a reference's parallel forward."""

    schema_prefix = "phasekv.conformance/"

    label: str
    reference_mode: str
    comparison: Comparison | None = None  # results written before the field have none
    stride: StrideSource
    ratios: list[int] = []  # every compression ratio of the layers (candidate's and reference's)
    tolerance: NonNegative
    modes: dict[str, ModeErrors]
    undefined_modes: dict[str, str]
    errored_modes: dict[str, str]  # modes that raised (message): they do not conform
    # the reference's second parallel forward against its first; results written before the check have none
    reference_repeat: ModeErrors | None = None
    not_judged: str | None = None  # why, where the reference is not reproducible (then no mode was run)
    verdict: Literal["conforms", "does not conform", "not judged"] | None = None
    conforms: bool | None  # None: not judged
    failing_modes: list[str]
