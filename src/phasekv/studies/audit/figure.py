"""The audit in the report: its finding opens the page (`summary_html`: the model with its press or endpoint, each
probe's verdict, phase amplitude with its interval, MDE, the plan and the command that re-measures it), and its
template screen follows (`section_html`). The audit draws no figure of its own: its probes' results are ordinary
lookup (needle) results, drawn under "Accuracy by residue"."""

from __future__ import annotations

import html
from pathlib import Path

from phasekv.charts.inputs import Inputs, Result
from phasekv.results.base import press_label
from phasekv.stats.format import effect_cell, mde_cell, verdict_label

from .result import AuditResult, plan_line


def section(inputs: Inputs) -> dict | None:
    audits = inputs.of("audit")
    if not audits:
        return None
    return {"audits": [_audit(r, inputs) for r in audits]}


def _audit(r: Result, inputs: Inputs) -> dict:
    audit: AuditResult = r.typed
    probes = []
    for probe, ran in audit.probes.items():
        # the probe's result file sits beside audit.json; a report of audit.json alone has the verdict's words only
        found = next((p for p in inputs.of("residues") if p.path == r.path.parent / ran.file), None)
        verdict = found.typed.phase_verdict if found is not None else None
        probes.append(
            {
                "probe": probe,
                "verdict": verdict_label(verdict) if verdict else ran.verdict or "–",
                "effect": (verdict and effect_cell(verdict)) or "–",
                "mde": (verdict and mde_cell(verdict)) or "–",
                "period": verdict["period"] if verdict else None,
                "command": ran.command,
            }
        )
    if audit.budget_s is None:
        goal = f"a target MDE of {audit.options['mde_points']:g} points"
    else:
        goal = f"a budget of {audit.budget_s / 60:g} min"
    return {
        "name": r.name,
        "model": describe_model(audit.model),
        "goal": goal,
        "probes": probes,
        "plan": [plan_line(p) for p in audit.plan],
        "screen": [s.brief() for s in audit.screen],
        "screen_split": audit.screen_split,
        "template": audit.template,
        "file": r.path.as_posix(),
    }


def describe_model(model: dict) -> str:
    """What was audited, in a reader's words: 'Hugging Face Qwen3ForCausalLM, full attention', 'served at URL as
    NAME', 'Hugging Face LlamaForCausalLM with press chunkkv8, compression stride 8', and its folder."""
    kind = model.get("kind")
    if kind == "endpoint":
        what = f"served at {model.get('endpoint')} as {model.get('served_model')}"
    elif kind == "hf":
        what = "Hugging Face " + (", ".join(model.get("architectures") or []) or model.get("model_type", "model"))
    else:
        what = f"{kind} model"
    what += press_label(model)
    stride = model.get("compression_stride")
    if stride is not None:
        what += f", compression stride {stride}"
    elif not model.get("press") and kind != "endpoint":
        what += ", full attention"
    if model.get("path"):
        what += f" ({Path(model['path']).as_posix()})"
    return what


def summary_html(d: dict) -> str:
    """Each audit's finding: the model, then per probe its verdict, amplitude and MDE, the plan and how to
    re-measure it."""
    return "".join(_finding(a) for a in d["audits"])


def _finding(a: dict) -> str:
    def row(p: dict) -> str:
        period = "–" if p["period"] is None else str(p["period"])
        cells = [p["probe"], p["verdict"], p["effect"], p["mde"], period]
        return "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>"

    commands = "".join(
        f"<li>{html.escape(p['probe'])}: <code>{html.escape(p['command'])}</code></li>" for p in a["probes"]
    )
    plan = "".join(f"<li>{html.escape(line)}</li>" for line in a["plan"])
    return f"""<div class="finding" id="audit-finding">
<p class="headline">Audit of <b>{html.escape(a["name"])}</b>: {html.escape(a["model"])}.</p>
<table class="data" id="audit-table" aria-label="The audit's finding per probe">
<thead><tr><th>probe</th><th>phase verdict</th><th>phase amplitude [95% CI]</th><th>MDE, points</th>
<th>period</th></tr></thead><tbody>{"".join(row(p) for p in a["probes"])}</tbody></table>
<p class="small">The design, sized to {html.escape(a["goal"])} before anything was scored:</p>
<ul class="plan">{plan}</ul>
<p class="small">Re-measure (the same prompts, scored again):</p><ul class="commands">{commands}</ul>
</div>"""


def section_html(d: dict) -> str:
    screens = "".join(
        f"""<p>{html.escape(a["name"])}: {html.escape(" · ".join(a["screen"]))} → the {html.escape(a["template"])}
template ({html.escape(a["file"])}).</p>"""
        for a in d["audits"]
    )
    return f"""
<section id="sec-audit"><h2>The audit's template screen</h2>
<p class="sub">Before sizing the design, the audit scores a few prompts of each lookup template on mappings of the
calibration split (which the run never draws) and keeps the one the model answers best; its time per prompt prices
the designs of the plan above.</p>
{screens}</section>"""


def png(data: dict, inputs: Inputs, out_dir: Path) -> list[Path]:
    """No figure of its own (see the module docstring)."""
    return []
