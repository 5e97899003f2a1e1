"""The audit's result format (`phasekv audit`, `phasekv.audit`): the template screen, the plan the design was
sized by, and per probe run its file, its one-screen finding and the command that re-measures it. The probes'
own results are ordinary `ProbeResult` files beside it (`probe_result`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from phasekv.results.base import NonNegative, Proportion, Typed, TypedResult, press_label
from phasekv.results.base import model_label as scored_model_label
from phasekv.stats.format import format_mde
from phasekv.studies.probe import registry

from .options import SCHEMA


class ScreenedTemplate(Typed):
    """One template of the screen: its accuracy on the screen's prompts and their timing, or why it was not
    used (`error`: the template does not compile for the tokenizer, or the screen had used its share of the
    budget before it)."""

    template: str
    accuracy: Proportion | None = None
    prompts: int = 0
    distinct_prompts: int = 0
    seconds: NonNegative | None = None
    seconds_per_prompt: NonNegative | None = None
    longest: int | None = None
    error: str | None = None

    @property
    def usable(self) -> bool:
        return self.error is None

    def brief(self) -> str:
        """'natural 62.5% (12 prompts, 0.61 s each)', or the template and why it was not used."""
        if not self.usable:
            return f"{self.template}: not used ({self.error})"
        return (
            f"{self.template} {100 * self.accuracy:.1f}% ({self.distinct_prompts} prompts, "
            f"{self.seconds_per_prompt:.2f} s each)"
        )


class PlannedProbe(Typed):
    """The design chosen for one probe, and its cost, before scoring (`skipped`: why it was not run)."""

    probe: str
    options: dict[str, Any] | None = None
    prompts: int | None = None
    distinct_prompts: int | None = None
    eta_s: NonNegative | None = None
    planned_mde: dict[str, Any] | None = None
    skipped: str | None = None


class AuditedProbe(Typed):
    """A probe the audit ran: its result file (in the audit's folder), its finding and how to re-measure it."""

    file: str
    verdict: str | None
    text: str
    command: str


class AuditResult(TypedResult):
    """`phasekv audit`: the screen, the plan and the probes run."""

    schema_prefix = SCHEMA.rsplit("/", 1)[0] + "/"

    schema_id: str = Field(alias="schema", pattern=r"^phasekv\.audit/\d+$")
    model: dict[str, Any]
    options: dict[str, Any]
    out: str
    screen: list[ScreenedTemplate]
    template: str
    period: dict[str, Any] | None = None  # `stats.stride.Period`: audits written before it was recorded lack it
    screen_split: str
    plan: list[PlannedProbe]
    probes: dict[str, AuditedProbe]
    budget_s: NonNegative | None
    wall_time_s: NonNegative
    report: str | None = None

    @property
    def verdict(self) -> str | None:
        """The lookup's phase verdict (`stats.verdict`'s wording)."""
        lookup = self.probes.get("lookup")
        return None if lookup is None else lookup.verdict

    @property
    def summary(self) -> str:
        """The one-screen verdict the command prints."""
        screened = " · ".join(s.brief() for s in self.screen)
        lines = [
            f"audit of {model_label(self.model)}",
            *([self.period["reason"]] if self.period else []),
            f"screen ({self.screen_split} mappings, not reused by the run): {screened} -> {self.template}",
            *(plan_line(p) for p in self.plan),
        ]
        for probe in self.probes.values():
            lines += ["", probe.text, f"re-measure: {probe.command}"]
        budget = "" if self.budget_s is None else f" of a {self.budget_s / 60:g} min budget"
        files = ", ".join(
            [p.file for p in self.probes.values()] + ["audit.json"] + ([self.report] if self.report else [])
        )
        lines += ["", f"wrote {self.out}/: {files}", f"wall time {self.wall_time_s:.0f} s{budget}"]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary

    def probe_result(self, probe: str = "lookup"):
        """The `ProbeResult` of one probe the audit ran, read from its folder."""
        from phasekv.studies.probe.result import ProbeResult

        if probe not in self.probes:
            raise KeyError(f"the audit ran {sorted(self.probes)}, not {probe!r}")
        return ProbeResult.load(Path(self.out) / self.probes[probe].file)

    def figure(self, probe: str = "lookup") -> dict:
        """The residue figure of one probe (`ProbeResult.figure`), a Vega-Lite spec."""
        return self.probe_result(probe).figure()


def model_label(model: dict) -> str:
    """The audited model as a reader names it (a served model's name, else its folder), with its press."""
    return scored_model_label(model) + press_label(model)


def plan_line(plan: PlannedProbe) -> str:
    """One line of the plan: the design, its size, its planned MDE and its ETA; or why the probe is skipped."""
    if plan.skipped is not None:
        return f"plan {plan.probe}: skipped ({plan.skipped})"
    o = plan.options or {}
    probe = registry.get(plan.probe)
    units = f"{probe.units(o)} {probe.unit}s"
    size = probe.audit_size(o)
    mde = plan.planned_mde
    planned = "not testable at this period" if mde is None else f"planned {format_mde(mde)}"
    if mde is not None:
        planned += f" at a flat {100 * mde['mean_base_accuracy']:.0f}% (the screen's)"
    return (
        f"plan {plan.probe}: {o.get('template')} template, {o.get('protocol') or '-'} padding, {size}, {units} x "
        f"{o['modulus']} residues, spread {o['spread_blocks']}: {plan.prompts} prompts ({plan.distinct_prompts} "
        f"distinct); {planned}; ETA {plan.eta_s:.0f} s"
    )
