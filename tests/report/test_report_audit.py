"""The report of an audit of a pretrained-style model (Hugging Face, full attention, no compressor) opens on the
audit's finding (the model, verdict, amplitude with its interval, MDE, the plan and the re-measure command), holds
only the sections that apply to such a model, names the model rather than its result file, and its residue figure
promises nothing it does not draw and folds at the phase test's period. In headless Chromium its own self-test
passes and a screenshot shows it."""

from __future__ import annotations

import html
import json
import shutil
from pathlib import Path

import pytest

from browser_helpers import browser, passed_selftest, screenshot
from phasekv.report import build_report, load_results
from phasekv.results.record import write_results
from phasekv.stats.format import effect_cell, mde_cell, verdict_label
from phasekv.studies.audit.result import plan_line
from phasekv.studies.probe import figure as residues

SCREENSHOT = Path("/tmp/phasekv_audit_report_screenshot.png")


@pytest.fixture(scope="module")
def report(pretrained_audit, tmp_path_factory) -> Path:
    """The audit's folder reported by `phasekv report` (no PNGs: the browser draws the page)."""
    return build_report(pretrained_audit.out, tmp_path_factory.mktemp("report") / "report.html", pngs=False).html


def test_the_report_of_a_pretrained_audit_opens_on_its_finding(pretrained_audit, report, qwen_dir):
    text = report.read_text()
    verdict = pretrained_audit.probe_result().phase_verdict
    start, end = text.index('id="audit-finding"'), text.index("</div>", text.index('id="audit-finding"'))
    finding = text[start:end]
    # nothing before the finding but the title: no notes, no other section
    assert text.index('id="sec-summary"') < start < text.index('id="summary-table"') < text.index('id="sec-residues"')
    assert "left out" not in text[:start]
    assert f"Audit of <b>{Path(qwen_dir).name}</b>: Hugging Face Qwen3ForCausalLM, full attention" in finding
    for shown in (verdict_label(verdict), effect_cell(verdict), mde_cell(verdict), str(verdict["period"])):
        assert f"<td>{html.escape(shown)}</td>" in finding, shown
    for plan in pretrained_audit.plan:  # the design as sized before scoring, and how to re-measure it
        assert html.escape(plan_line(plan)) in finding
    assert f"<code>{html.escape(pretrained_audit.probes['lookup'].command)}</code>" in finding
    assert "a budget of 10 min" in finding


def test_a_pretrained_audit_report_holds_only_the_sections_that_apply(pretrained_audit, report, qwen_dir, tmp_path):
    out = build_report(pretrained_audit.out, tmp_path / "r.html", pngs=False)
    assert out.sections == ["audit", "residues"]  # no compressor illustration for a model without a compressor
    text = out.html.read_text()
    assert 'id="sec-compressor"' not in text
    # gates, cycling and the theory are about a compressor this model does not have; flip and knockout could run
    assert sorted(note.split(" left out")[0] for note in out.notes) == ["Flip probe", "Knockout map"]
    assert text.index('id="report-notes"') > text.index('id="sec-residues"')  # what is missing comes last
    # the model is named by its folder, not by its result file ("lookup")
    (series,) = residues.section(load_results(pretrained_audit.out))["series"]
    assert series["name"] == Path(qwen_dir).name
    assert f'<td>{Path(qwen_dir).name} <span class="chance">' in text or f"<td>{Path(qwen_dir).name}</td>" in text


def _colour_scales(spec) -> list[dict]:
    """Every colour encoding by role in a spec, at any depth."""
    if isinstance(spec, dict):
        found = [spec["color"]] if isinstance(spec.get("color"), dict) and spec["color"].get("field") == "role" else []
        return found + [c for v in spec.values() for c in _colour_scales(v)]
    if isinstance(spec, list):
        return [c for v in spec for c in _colour_scales(v)]
    return []


def _compressed_copy(source: Path, target: Path, stride: int) -> Path:
    """The lookup result at `source` as if its model compressed its cache with `stride`, saved at `target`."""
    data = json.loads(source.read_text())
    data["model"].update(compression_stride=stride, path=str(Path(data["model"]["path"]).with_name("compressed")))
    data["stride"] = {"value": stride, "source": "model config"}
    return write_results(data, target)


def test_the_residue_figure_promises_only_what_it_draws(pretrained_audit, tmp_path):
    alone = residues.spec(residues.section(load_results(Path(pretrained_audit.out) / "lookup.json")))
    assert alone["title"] == "Accuracy by residue with 95% bands"  # no rules nor triangles without a stride
    assert "full attention" not in alone["description"] and "compressed" not in alone["description"]
    for colour in _colour_scales(alone):  # one series: its colour, and no legend naming absent ones
        assert colour["scale"]["domain"] == ["model"] and colour["legend"] is None
    both = tmp_path / "both"
    both.mkdir()
    shutil.copy(Path(pretrained_audit.out) / "lookup.json", both / "full.json")
    _compressed_copy(both / "full.json", both / "compressed.json", stride=4)
    block = residues.section(load_results(both))
    mixed = residues.spec(block)
    assert mixed["title"].endswith("dashed rules: period boundaries; triangles: boundary phase S-1")
    assert mixed["description"].endswith("one panel per compressed model, full attention dashed behind it")
    # the random full-attention model is at chance: drawn as such, and the legend lists no learned control
    for colour in _colour_scales(mixed):
        assert colour["scale"]["domain"] == ["model", "full attention, not learned"]
    caption = residues.section_html(block)
    assert "Dashed vertical rules" in caption and "Triangles under the axis" in caption
    assert "Dashed vertical rules" not in residues.section_html(residues.section(load_results(both / "full.json")))


def test_a_model_without_a_stride_folds_at_the_phase_tests_period(pretrained_audit, tmp_path):
    period = pretrained_audit.probe_result().phase_verdict["period"]
    block = residues.section(load_results(Path(pretrained_audit.out) / "lookup.json"))
    assert block["series"][0]["fold_by"] == period < block["series"][0]["modulus"]
    (fold,) = [p for p in residues.spec(block)["params"] if p["name"] == "fold"]
    assert fold["bind"]["input"] == "checkbox"
    assert 'data-foldable="1"' in residues.section_html(block)
    # a stride equal to the modulus leaves no periods to overlay: no toggle that would do nothing
    whole = _compressed_copy(Path(pretrained_audit.out) / "lookup.json", tmp_path / "whole.json", stride=8)
    block = residues.section(load_results(whole))
    (fold,) = [p for p in residues.spec(block)["params"] if p["name"] == "fold"]
    assert "bind" not in fold and "data-foldable" not in residues.section_html(block)


def test_a_pretrained_audit_report_in_headless_chromium(report, tmp_path):
    binary = browser()
    names = passed_selftest(binary, report, tmp_path / "profile")
    assert {"the fold toggle changes the x axis", "the fold toggle restores the x axis"} <= names, names
    assert {"figure fig-residues renders", "no errors on the page"} <= names, names
    shot = screenshot(binary, report, tmp_path / "profile2", tmp_path / "audit.png", size="1100,1800")
    try:  # kept where a person can look at it
        shutil.copy(shot, SCREENSHOT)
    except OSError:
        pass


def test_the_finding_names_a_press_and_an_endpoint():
    from phasekv.studies.audit.figure import describe_model

    pressed = {"kind": "hf", "architectures": ["LlamaForCausalLM"], "path": "m/smollm2", "compression_stride": 8}
    pressed["press"] = {"spec": "chunkkv8"}
    assert (
        describe_model(pressed) == "Hugging Face LlamaForCausalLM with press chunkkv8, compression stride 8 (m/smollm2)"
    )
    served = {
        "kind": "endpoint",
        "endpoint": "http://127.0.0.1:8000/v1",
        "served_model": "tiny",
        "compression_stride": 4,
    }
    assert describe_model(served) == "served at http://127.0.0.1:8000/v1 as tiny, compression stride 4"
