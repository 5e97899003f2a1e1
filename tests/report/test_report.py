"""The HTML report: loading and checking result files, sections left out with a note, a
self-contained page, PNG figures, the CLI command, and the page itself in headless Chromium
(its built-in self-test: every figure draws marks, a model row narrows the residue figure to its panel
and the position figure follows, the fold toggle changes the x axis, prepending a token and clicking a chip
move the compressor illustration's followed token, no console errors; plus a screenshot)."""

from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch
import typer
import vl_convert
from typer.testing import CliRunner

from browser_helpers import browser, dumped, passed_selftest, run_chromium, screenshot
from conftest import randomize
from phasekv.charts import vega
from phasekv.charts.labels import head_label
from phasekv.charts.vega import VEGALITE_VERSION, write_png
from phasekv.cli.report import report_command
from phasekv.model import PhaseKVModel, preset_config, save_checkpoint
from phasekv.report import ReportInputError, build_report, load_results
from phasekv.results.record import write_results
from phasekv.scoring import PhaseKVScorer
from phasekv.stats.seeds import compare_seeds, seed_summary
from phasekv.studies.cycle import figure as cycle
from phasekv.studies.cycle.figure import plot_cycle
from phasekv.studies.cycle.run import run_cycle
from phasekv.studies.designs import figure as designs
from phasekv.studies.flip import figure as flip
from phasekv.studies.flip.options import FlipOptions
from phasekv.studies.flip.run import run_flip
from phasekv.studies.gates import figure as gates
from phasekv.studies.gates.figure import plot_gate_trajectory, plot_gates
from phasekv.studies.gates.illustration import illustration
from phasekv.studies.gates.run import run_gates
from phasekv.studies.knockout import figure as knockout
from phasekv.studies.knockout.figure import plot_knockout
from phasekv.studies.knockout.options import KnockoutOptions
from phasekv.studies.knockout.run import run_knockout
from phasekv.studies.probe import figure as residues
from phasekv.studies.probe.positions import position_bins
from phasekv.studies.probe.run import run_lookup
from phasekv.studies.theory import figure as theory
from phasekv.tasks.lookup import LookupOptions
from phasekv.tasks.tokenizer import build_word_tokenizer
from phasekv.theory.sweep import run_sweep
from phasekv.theory.theorem2 import GateTrainingConfig, train_gates
from phasekv.train.gates import gate_snapshot, write_snapshot

TOKENIZER = build_word_tokenizer()
V = len(TOKENIZER)
LOOKUP = LookupOptions(n_records=8, n_demos=2, modulus=8, n_mappings=4)
ROOT = Path(__file__).resolve().parents[2]


def _design(name: str, role: str, mean: list, gap: list, learned: list, misses: tuple = ()) -> dict:
    """A design row with the keys the report reads (studies.designs.run.design_rows writes more)."""
    return {
        "design": name,
        "control": role == "control",
        "baseline": role == "baseline",
        "seeds": [0, 1],
        "cache_bytes_per_token": 64.0 if role == "control" else 8.0,
        "mean": mean,
        "worst": [m - g for m, g in zip(mean, gap, strict=True)],
        "gap": gap,
        "period_diff": [1.0, 2.0],
        "learned": learned,
        "meets_target": None if role != "candidate" else not misses,
        "misses": list(misses),
        "mean_over_seeds": seed_summary(mean),
        "gap_over_seeds": seed_summary([g for g, ok in zip(gap, learned, strict=True) if ok]),  # learned seeds
    }


DESIGNS = {  # a design comparison as `phasekv reproduce --profile mitigations` writes it (designs.json)
    "schema": "phasekv.designs/1",
    "knockout_run": None,
    "designs": [
        _design("full attention", "control", [90.0, 88.0], [10.0, 8.0], [True, True]),
        _design("W8/S8", "baseline", [70.0, 60.0], [50.0, 55.0], [True, True]),
        _design("stagger", "candidate", [75.0, 12.0], [15.0, 3.0], [True, False], ("not learned (chance)",)),
    ],
    "tests": [{"claim": "stagger gap < W8/S8 gap", **compare_seeds([15.0, 3.0], [50.0, 55.0], "less")}],
}
SCREENSHOT = Path("/tmp/phasekv_report_screenshot.png")


def _model(name: str, seed: int = 0) -> PhaseKVModel:
    torch.manual_seed(seed)
    return randomize(PhaseKVModel(preset_config(name, "tiny", vocab_size=V)), seed=seed, std=0.1).eval()


def _scorer(model) -> PhaseKVScorer:
    return PhaseKVScorer(model, TOKENIZER, batch_size=64)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """Every kind of result file, written by the real code paths on tiny random models."""
    out = tmp_path_factory.mktemp("results")
    for name in ("full-1kv", "w8s8-1kv", "w8s4-1kv"):
        result = run_lookup(_scorer(_model(name)), LOOKUP, n_resamples=100, progress=False)
        result.update(run=name, label=name, preset=name, training={"final_val_loss": 2.5})
        write_results(result, out / "results" / f"{name}.json")
    heads = _model("w8s8-8kv")
    knock = run_knockout(_scorer(heads), LOOKUP, KnockoutOptions(calibration_mappings=2, batch_size=64), progress=False)
    for i, target in enumerate(knock["targets"]):  # random models retrieve nothing: plant visible changes
        target["relative_change_by_phase"] = [((i * 7 + r * 13) % 200) - 100.0 for r in range(8)]
        target["relative_change_by_residue"] = list(target["relative_change_by_phase"])
    write_results(knock, out / "analysis" / "knockout.json")
    write_results(run_gates(_scorer(heads), LOOKUP), out / "analysis" / "gates.json")
    run_dir = out / "train_run"
    ids = torch.randint(0, V, (4, 64), generator=torch.Generator().manual_seed(0))
    for step in (0, 10, 20):
        model = _model("w8s8-1kv", seed=step)
        write_snapshot(run_dir, gate_snapshot(model, model.config.compression, ids, step))
    cycle = run_cycle(_scorer(_model("w8s8-1kv")), [-1, 1, 2], LOOKUP, n_resamples=50, progress=False)
    for i, c in enumerate(cycle["cycles"]):  # random models retrieve nothing (R² undefined): plant fits to select
        c.update(r2=0.5 + 0.1 * i, r2_interval=[0.3, 0.9])
    write_results(cycle, out / "analysis" / "cycle.json")
    flip = FlipOptions(context="y = T . Cast ( FP", n_lengths=8, families=("equals", "lorem"), n_permutations=50)
    write_results(run_flip(_scorer(_model("w8s4-1kv")), flip, progress=False), out / "flip.json")
    small = dict(n_tokens=16, n_chunks=4, batch_size=16, n_eval_contexts=32, record_every=10)
    write_results(train_gates(GateTrainingConfig(**small, steps=30, n_heads=3)), out / "theory" / "theorem2.json")
    sweep = run_sweep(GateTrainingConfig(**small, steps=10), {"n_heads": [2, 3]}, [0, 1], progress=False)
    write_results(sweep, out / "theory" / "sweep.json")
    write_results(DESIGNS, out / "designs.json")  # `phasekv reproduce --profile mitigations`' comparison
    (out / "notes.json").write_text('{"anything": "else"}')
    return out


@pytest.fixture(scope="module")
def report(results, tmp_path_factory) -> Path:
    ckpt = save_checkpoint(_model("w8s8-1kv"), tmp_path_factory.mktemp("ckpt"))
    out = tmp_path_factory.mktemp("report") / "report.html"
    build_report(results, out, compressor=illustration(ckpt))
    return out


def _copy(results: Path, tmp_path: Path, *parts: str) -> Path:
    target = tmp_path / "subset"
    for part in parts:
        src = results / part
        dest = target / part
        dest.parent.mkdir(parents=True, exist_ok=True)
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest)
    return target


# ---------- loading and validation ----------


def test_loader_reads_every_kind_and_ignores_other_json(results):
    inputs = load_results(results)
    counts = {kind: len(found) for kind, found in inputs.results.items()}
    assert counts == {
        "residues": 3,
        "knockout": 1,
        "gates": 1,
        "cycle": 1,
        "flip": 1,
        "theorem2": 1,
        "sweep": 1,
        "gate_trajectory": 1,  # from the training run's gate snapshots
        "designs": 1,
    }
    assert "notes.json" in inputs.ignored
    trajectory = inputs.of("gate_trajectory")[0].data
    assert [s["step"] for s in trajectory["steps"]] == [0, 10, 20]


def test_malformed_json_is_a_clear_error_naming_the_file(results, tmp_path):
    subset = _copy(results, tmp_path, "results")
    bad = subset / "results" / "broken.json"
    bad.write_text('{"schema": "phasekv.eval/1", "probe": ')
    with pytest.raises(ReportInputError, match=re.escape(str(bad)) + ".*not valid JSON"):
        load_results(subset)


def test_every_result_kind_is_typed_and_keeps_its_whole_content(results):
    """Each result the report reads is validated as its kind's typed format, which writes back the same JSON."""
    inputs = load_results(results)
    kinds = {kind for kind, found in inputs.results.items() if found}
    expected = {"residues", "flip", "knockout", "gates", "gate_trajectory", "cycle", "designs", "theorem2", "sweep"}
    assert expected <= kinds
    for found in inputs.results.values():
        for result in found:
            assert result.typed.to_dict() == json.loads(json.dumps(result.data)), result.path


@pytest.mark.parametrize(
    "kind, path",
    [("knockout", "analysis/knockout.json"), ("gates", "analysis/gates.json"), ("cycle", "analysis/cycle.json")],
)
def test_a_result_under_its_old_schema_id_still_loads_as_its_kind(results, tmp_path, kind, path):
    # Results were written as "phasekv.analysis.<kind>/1" before the studies left the analysis package.
    copied = _copy(results, tmp_path, path) / path
    data = json.loads(copied.read_text())
    assert data["schema"] == f"phasekv.{kind}/1"
    copied.write_text(json.dumps({**data, "schema": f"phasekv.analysis.{kind}/1"}))
    (found,) = load_results(copied.parent).results[kind]
    assert found.data["schema"] == f"phasekv.analysis.{kind}/1"
    assert found.typed.to_dict() == json.loads(json.dumps(found.data))


def test_designs_and_gate_trajectories_keep_their_old_schema_ids_readable():
    from phasekv.studies.designs.result import DesignsResult
    from phasekv.studies.gates.result import GateTrajectoryResult

    for cls, kind in ((DesignsResult, "designs"), (GateTrajectoryResult, "gate_trajectory")):
        assert cls.recognises({"schema": f"phasekv.{kind}/1"}) and cls.recognises(
            {"schema": f"phasekv.analysis.{kind}/1"}
        )
        assert not cls.recognises({"schema": f"phasekv.{kind}s-of-something-else/1"})


def test_missing_key_is_a_clear_error_naming_the_file_and_key(results, tmp_path):
    subset = _copy(results, tmp_path, "results")
    path = subset / "results" / "w8s8-1kv.json"
    data = json.loads(path.read_text())
    del data["summary"]["ci_low"]
    path.write_text(json.dumps(data))
    with pytest.raises(ReportInputError, match=re.escape(str(path)) + ".*summary.ci_low: Field required"):
        load_results(subset)
    knock = _copy(results, tmp_path / "k", "analysis/knockout.json") / "analysis" / "knockout.json"
    data = json.loads(knock.read_text())
    del data["targets"][1]["change_by_phase"]
    knock.write_text(json.dumps(data))
    with pytest.raises(
        ReportInputError, match=re.escape(str(knock)) + r".*targets\[1\].change_by_phase: Field required"
    ):
        load_results(knock.parent)


def test_the_report_refuses_a_result_with_impossible_accuracies(results, tmp_path):
    """A hand-edited lookup result with accuracies up to 4000% and a mean of -5 is not drawn as a measurement."""
    app = typer.Typer()
    app.command()(report_command)
    subset = _copy(results, tmp_path, "results")
    path = subset / "results" / "w8s8-1kv.json"
    data = json.loads(path.read_text())
    data["summary"]["accuracy"] = [0.1, 0.2, 40.0, 0.3, 0.0, 0.5, 0.1, 0.2]
    data["summary"]["mean"] = -5.0
    path.write_text(json.dumps(data))
    res = CliRunner().invoke(app, [str(subset), "--out", str(tmp_path / "r.html"), "--no-pngs"])
    assert res.exit_code == 1 and not (tmp_path / "r.html").exists()
    assert "w8s8-1kv.json" in res.output and "summary.accuracy[2]: 40.0 is outside [0, 1]" in res.output, res.output
    assert "summary.mean: -5.0 is outside [0, 1]" in res.output


@pytest.mark.parametrize(
    ("part", "change", "message"),
    [
        (
            "analysis/knockout.json",
            lambda d: d["clean"]["accuracy_by_phase"].__setitem__(1, 1.2),
            r"clean.accuracy_by_phase\[1\]: 1.2 is outside \[0, 1\]",
        ),
        (
            "analysis/knockout.json",
            lambda d: d["targets"][0]["change_by_residue"].__setitem__(0, -3.0),
            r"targets\[0\].change_by_residue\[0\]: -3.0 is outside \[-1, 1\]",
        ),
        (
            "analysis/cycle.json",
            lambda d: d["cycles"][1]["band"][0].__setitem__(1, 2.0),
            r"cycles\[1\].band\[0\]\[1\]: 2.0 is outside \[0, 1\]",
        ),
        (
            "analysis/gates.json",
            lambda d: d["rows"][0]["phase_share"].__setitem__(0, -0.5),
            r"rows\[0\].phase_share\[0\]: -0.5 is outside \[0, 8\]",
        ),
        (
            "designs.json",
            lambda d: d["designs"][1]["gap"].__setitem__(0, 150.0),
            r"designs\[1\].gap\[0\]: 150.0 is outside \[0, 100\]",
        ),
    ],
)
def test_every_study_refuses_values_out_of_their_range(results, tmp_path, part, change, message):
    path = _copy(results, tmp_path, part) / part
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    with pytest.raises(ReportInputError, match=re.escape(str(path)) + ".*" + message):
        load_results(path.parent)


# ---------- the page ----------


class _Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.refs, self.tags = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for key, value in attrs:
            if key in ("src", "href", "xlink:href", "srcset", "action", "data") and value is not None:
                self.refs.append((tag, key, value))


def test_html_is_self_contained_with_every_section(report):
    text = report.read_text()
    parser = _Refs()
    parser.feed(text)
    assert not [r for r in parser.refs if re.match(r"\s*(https?:)?//", r[2], re.I)], parser.refs
    assert "link" not in parser.tags and "iframe" not in parser.tags and "img" not in parser.tags
    assert not re.search(r"<script[^>]*\bsrc=", text) and not re.search(r"@import|url\(\s*['\"]?https?:", text)
    assert not re.search(r"""(src|href)\s*=\s*["']?https?:""", text, re.I)
    for section in ("residues", "flip", "knockout", "gates", "cycle", "theory", "designs", "compressor"):
        assert f'id="sec-{section}"' in text
    assert 'id="report-notes"' not in text  # nothing left out
    figures = _figures(text)
    assert len(figures) >= 9 and all(label for label in figures.values())
    assert text.count("window.vegaEmbed=") == 1  # the Vega bundle, once, for every spec-drawn figure
    (source,) = [r["text"] for r in _values(_spec(text, "fig-compressor")) if r["kind"] == "source"]
    assert source.startswith("source: model ")  # driven by the checkpoint's gate parameters
    knocked = _values(_spec(text, "fig-knockout"))
    assert any(r["kind"] == "gate" and r["branch"] == "key" for r in knocked)  # gate preference beside the row
    assert set(re.findall(r'<(\w+) [^>]*data-figure="1"', text)) == {"div"}  # every figure is drawn from its spec
    assert 'id="report-data"' not in text
    assert "sweep" in text and "<th>full coverage (%)</th>" in text  # the sweep's table, written into the HTML
    assert {row.get("model") for row in _values(_spec(text, "fig-residues"))} - {None} == {
        "full-1kv",
        "w8s8-1kv",
        "w8s4-1kv",
    }


def _figures(text: str) -> dict[str, str]:
    """Every figure of the page (a Vega container) by id: its text alternative."""
    found = re.findall(r'<div id="([\w-]+)"[^>]*data-figure="1"[^>]*aria-label="([^"]+)"', text)
    return dict(found)


def _spec(text: str, fig_id: str) -> dict:
    """The Vega-Lite spec the page embeds for the figure `fig_id`."""
    found = re.search(rf'<script type="application/json" data-spec-for="{fig_id}">(.*?)</script>', text, re.S)
    return json.loads(found[1].replace("<\\/", "</"))


def _values(spec: dict) -> list[dict]:
    return spec["data"]["values"]


def test_residue_spec_holds_every_model_with_its_bands_boundaries_and_params(results):
    inputs = load_results(results)
    spec = residues.spec(residues.section(inputs))
    assert {p["name"]: p["value"] for p in spec["params"]} == {"model": "all", "fold": False}
    model = next(p for p in spec["params"] if p["name"] == "model")
    assert model["bind"]["options"] == ["all", "w8s4-1kv", "w8s8-1kv"]  # a panel per compressed model
    rows = _values(spec)
    for result in inputs.of("residues"):
        summary = result.typed.residue_summary
        compressed = result.typed.compressed
        for panel in ("w8s4-1kv", "w8s8-1kv") if not compressed else (result.name,):
            drawn = sorted(
                (r for r in rows if r["kind"] == "series" and r["panel"] == panel and r["model"] == result.name),
                key=lambda r: r["residue"],
            )
            control = "full attention" if result.typed.learned() is not False else "full attention, not learned"
            assert [r["role"] for r in drawn] == ["model" if compressed else control] * summary.modulus
            assert [r["accuracy"] for r in drawn] == [round(100 * a, 3) for a in summary.accuracy]
            assert [r["low"] for r in drawn] == [round(100 * a, 3) for a in summary.ci_low]
            assert [r["high"] for r in drawn] == [round(100 * a, 3) for a in summary.ci_high]
    w8s4 = [r for r in rows if r["panel"] == "w8s4-1kv"]
    assert [r["residue"] for r in w8s4 if r["kind"] == "boundary"] == [4]  # period boundary between 3 and 4
    assert [r["residue"] for r in w8s4 if r["kind"] == "boundary phase"] == [3, 7]


def test_pngs_are_written_beside_the_report_and_the_write_is_atomic(report):
    figures = report.parent / "report_figures"
    names = sorted(p.name for p in figures.glob("*.png"))
    assert names == [
        "compressor.png",
        "cycle.png",
        "designs.png",
        "flip.png",
        "gate_plane.png",
        "gate_plane_1.png",  # the training run's gate snapshots
        "knockout.png",
        "positions.png",
        "residues.png",
        "theory.png",
    ]
    assert all((figures / n).stat().st_size > 5000 for n in names)
    assert [p.name for p in report.parent.iterdir() if p.name.endswith(".tmp")] == []
    assert [p.name for p in figures.iterdir() if p.name.endswith(".tmp")] == []


def test_knockout_spec_holds_one_row_per_target_by_residue_and_phase_with_gates(results):
    inputs = load_results(results)
    result = inputs.of("knockout")[0].data
    (block,) = knockout.section(inputs)["maps"]
    spec = knockout.spec(block)
    rows = _values(spec)
    labels = [head_label(t) for t in result["targets"]]
    for kind, key, width in (("residue", "relative_change_by_residue", 8), ("phase", "relative_change_by_phase", 8)):
        cells = [r for r in rows if r["kind"] == kind]
        assert len(cells) == len(labels) * width
        for target, label in zip(result["targets"], labels, strict=True):
            drawn = [r["change"] for r in sorted(cells, key=lambda r: r["position"]) if r["label"] == label]
            assert drawn == [round(v, 2) for v in target[key]]
    gates = {(r["label"], r["branch"]) for r in rows if r["kind"] == "gate"}
    assert gates == {(label, branch) for label in labels for branch in ("key", "value")}  # matched gate results
    params = {p["name"]: p for p in spec["params"]}
    assert params["row"]["value"] == [{"label": labels[0]}] and len(params["row"]["views"]) == 2  # both heatmaps
    assert params["branch"]["bind"]["options"] == ["key", "value"]


def test_flip_spec_holds_every_family_length_and_candidate(results):
    inputs = load_results(results)
    result = inputs.of("flip")[0].data
    (run,) = flip.section(inputs)["runs"]
    spec = flip.spec(run)
    rows = _values(spec)
    candidates = run["candidates"]
    for family, rec in result["families"].items():
        drawn = [r for r in rows if r["family"] == family and r["kind"] == "p"]
        assert len(drawn) == len(rec["lengths"]) * len(candidates)
        for i, length in enumerate(rec["lengths"]):
            at = {r["candidate"]: r for r in drawn if r["length"] == length}
            assert [at[c]["p"] for c in candidates] == [round(p, 6) for p in rec["probabilities"][i]]
            assert [c for c in candidates if at[c]["top"]] == [rec["top"][i]]
        cycles = [r["edge"] for r in rows if r["family"] == family and r["kind"] == "cycle"]
        period, first = result["period"]["value"], rec["lengths"][0]
        assert cycles == [n - 0.5 for n in rec["lengths"][1:] if (n - first) % period == 0]
    family = next(p for p in spec["params"] if p["name"] == "family")
    assert family["value"] == "all" and family["bind"]["options"] == ["all", *result["families"]]


def test_gate_plane_specs_hold_every_head_the_shares_and_the_replayed_steps(results):
    inputs = load_results(results)
    result, trajectory = inputs.of("gates")[0].data, inputs.of("gate_trajectory")[0].data
    plane, run = gates.section(inputs)["planes"]
    rows = _values(gates.spec(plane))
    keys = [r for r in result["rows"] if r["branch"] == "key"]
    heads = {r["label"]: r for r in rows if r["kind"] == "head"}
    assert len(heads) == len(keys) == 16
    for r in keys:
        head = heads[head_label(r)]
        assert (head["x"], head["y"], head["layer"]) == (
            round(r["static_offsets"], 3),
            round(r["per_window_offsets"], 3),
            r["layer"],
        )
    shares = [r for r in rows if r["kind"] == "share"]
    assert len(shares) == sum(len(r["phase_share"]) for r in result["rows"])  # key and value gates
    spec = gates.spec(run)
    (step,) = spec["params"]
    assert step["name"] == "step" and step["value"] == 2 and step["bind"]["input"] == "range"
    rows = _values(spec)
    assert [r["text"] for r in rows if r["kind"] == "step"] == ["step 0", "step 10", "step 20"]
    for index, snapshot in enumerate(trajectory["steps"]):
        drawn = [r for r in rows if r["kind"] == "head" and r["index"] == index]
        assert len(drawn) == sum(r["branch"] == "key" for r in snapshot["rows"])
    final = sorted((r for r in rows if r["kind"] == "head" and r["index"] == 2), key=lambda r: r["x"])
    assert {r["label"] for r in rows if r["kind"] == "head" and r["traced"]} == {r["label"] for r in final[:3]}


def test_cycle_spec_holds_every_delta_by_phase_with_its_prediction_and_r2(results):
    inputs = load_results(results)
    result = inputs.of("cycle")[0].data
    (m,) = cycle.section(inputs)["models"]
    spec = cycle.spec(m)
    rows = _values(spec)
    stride, base = result["stride"], result["base"]["accuracy_by_phase"]
    assert [r["accuracy"] for r in rows if r["kind"] == "base"] == [round(100 * a, 3) for a in base]
    for c in result["cycles"]:
        drawn = [r for r in rows if r["kind"] == "cycle" and r["delta"] == c["delta"]]
        assert [r["phase"] for r in drawn] == list(range(stride))
        assert [r["accuracy"] for r in drawn] == [round(100 * a, 3) for a in c["accuracy_by_phase"]]
        assert [r["prediction"] for r in drawn] == [
            round(100 * base[(r - c["delta"]) % stride], 3) for r in range(stride)
        ]
        assert [r["boundary"] for r in drawn] == [r == result["boundary_phase"] for r in range(stride)]
        (fit,) = [r for r in rows if r["kind"] == "r2" and r["delta"] == c["delta"]]
        assert (fit["r2"], fit["r2_low"], fit["r2_high"]) == (round(c["r2"], 3), 0.3, 0.9)
    (delta,) = spec["params"]
    assert delta["value"] == -1 and delta["bind"]["options"] == [-1, 1, 2]


def test_theory_spec_holds_every_head_static_and_per_window(results):
    inputs = load_results(results)
    trajectory = inputs.of("theorem2")[0].data["trajectory"]
    (run,) = theory.section(inputs)["runs"]
    rows = _values(theory.spec(run))
    assert len(rows) == 2 * len(trajectory["step"]) * 3  # two measures, every recorded step, three heads
    for measure, key in (("static", "key_static"), ("per window", "key_per_window")):
        for h in range(3):
            drawn = [r for r in rows if r["measure"] == measure and r["head"].startswith(f"head {h} ")]
            assert [r["step"] for r in drawn] == trajectory["step"]
            assert [r["value"] for r in drawn] == [round(v[h], 3) for v in trajectory[key]]


def test_designs_spec_holds_every_seed_and_seed_mean(results):
    block = designs.section(load_results(results))
    spec = designs.spec(block)
    rows = _values(spec)
    for d in DESIGNS["designs"]:
        seeds = [r for r in rows if r["design"] == d["design"] and r["kind"] == "seed"]
        assert [(r["mean"], r["gap"], r["learned"]) for r in seeds] == list(
            zip(d["mean"], d["gap"], d["learned"], strict=True)
        )
        (mean,) = [r for r in rows if r["design"] == d["design"] and r["kind"] == "seed mean"]
        learned_gaps = [g for g, ok in zip(d["gap"], d["learned"], strict=True) if ok]
        assert (mean["mean"], mean["gap"]) == (sum(d["mean"]) / 2, sum(learned_gaps) / len(learned_gaps))
    assert [(p["name"], p["bind"]) for p in spec["params"]] == [("design", "legend")]  # picked out from the legend
    page = designs.section_html(block)  # seed means with t intervals, and the tests across seeds
    assert '<p id="designs-verdict">No candidate design met the target (1 tried).</p>' in page
    met = [{**row, "meets_target": True} if row["role"] == "candidate" else row for row in block["rows"]]
    assert designs.conclusion(met) == "1 of 1 candidate designs met the target: stagger."
    stagger = seed_summary([75.0, 12.0])  # its mean over both seeds; its gap over the learned one alone
    assert f"<td>{stagger['mean']:.1f} [{stagger['ci'][0]:.1f}, {stagger['ci'][1]:.1f}]</td><td>60.0 / 9.0</td>" in page
    assert "<td>15.0 / 3.0</td><td>15.0</td>" in page
    test = DESIGNS["tests"][0]
    assert 'id="designs-tests"' in page and f"<td>{test['permutation_p']:.3g} (of 6)</td>" in page


def test_spec_figures_render_to_png_from_the_same_spec(results, tmp_path):
    inputs = load_results(results)
    data = residues.section(inputs)
    path = write_png(residues.spec(data), tmp_path / "figs" / "residues.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 20_000
    assert [p.name for p in path.parent.iterdir()] == ["residues.png"]  # written atomically: no temporary left
    knocked = inputs.of("knockout")[0].data
    for path in (  # `phasekv knockout|gates|cycle --plot`: the report's specs
        plot_knockout(knocked, tmp_path / "k.png"),
        plot_gates(inputs.of("gates")[0].data["rows"], tmp_path / "g.png"),
        plot_gate_trajectory(inputs.of("gate_trajectory")[0].data, tmp_path / "t.png"),
        plot_cycle(inputs.of("cycle")[0].data, tmp_path / "c.png"),
    ):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 20_000


def test_sections_without_results_are_left_out_with_a_note(results, tmp_path):
    subset = _copy(results, tmp_path, "results")
    out = build_report(subset, tmp_path / "r.html", pngs=False)
    text = out.html.read_text()
    assert out.sections == ["residues", "compressor"]
    assert 'id="sec-residues"' in text and 'id="sec-knockout"' not in text and 'id="fig-knockout"' not in text
    for title in ("Flip probe", "Knockout map", "Gate plane", "Gate cycling", "Theory"):
        assert sum(note.startswith(f"{title} left out:") for note in out.notes) == 1
        assert f"{title} left out:" in text
    empty = build_report(tmp_path / "subset" / "results" / "full-1kv.json", tmp_path / "one.html", pngs=False)
    assert empty.sections == ["residues"]  # full attention alone: no compressor to illustrate
    figures = tmp_path / "r_figures"  # a rebuild drops the figures of results that are gone, keeps other files
    figures.mkdir()
    (figures / "knockout_3.png").write_bytes(b"stale")
    (figures / "notes.txt").write_text("mine")
    rebuilt = build_report(subset, tmp_path / "r.html")
    assert sorted(p.name for p in figures.iterdir()) == sorted([p.name for p in rebuilt.pngs] + ["notes.txt"])


def test_position_figure_bins_the_records_and_old_files_get_a_note(results, tmp_path):
    subset = _copy(results, tmp_path, "results")
    old = subset / "results" / "full-1kv.json"
    data = json.loads(old.read_text())
    del data["prompt_records"]  # a result file written before per-prompt records existed
    old.write_text(json.dumps(data))
    out = build_report(subset, tmp_path / "r.html")
    text = out.html.read_text()
    assert "No position plot for full-1kv" in text and 'id="fig-positions"' in text
    spec = _spec(text, "fig-positions")
    rows = _values(spec)
    assert {r["model"] for r in rows} == {"w8s8-1kv", "w8s4-1kv"}  # full-1kv has no records: no panel
    columns = json.loads((subset / "results" / "w8s8-1kv.json").read_text())["prompt_records"]["columns"]
    drawn = [r for r in rows if r["model"] == "w8s8-1kv"]
    bins = position_bins(columns["target_position"], columns["correct"])
    assert [r["n"] for r in drawn] == bins["n"] and sum(r["n"] for r in drawn) == len(columns["correct"])
    assert [r["accuracy"] for r in drawn] == [round(100 * a, 3) for a in bins["accuracy"]]
    assert [r["low"] for r in drawn] == [round(100 * a, 3) for a in bins["low"]]
    assert (drawn[0]["first"], drawn[-1]["last"]) == (min(columns["target_position"]), max(columns["target_position"]))
    x_domain = spec["spec"]["layer"][0]["encoding"]["x"]["scale"]["domain"]["expr"]
    assert json.dumps({"w8s8-1kv": [drawn[0]["first"] - 0.5, drawn[-1]["last"] + 0.5]})[1:-1] in x_domain
    assert "positions.png" in [p.name for p in out.pngs]


def test_cli_command_writes_the_report_and_reports_bad_files(results, tmp_path):
    app = typer.Typer()
    app.command()(report_command)
    runner = CliRunner()
    out = tmp_path / "cli" / "report.html"
    res = runner.invoke(app, [str(_copy(results, tmp_path, "results", "flip.json")), "--out", str(out), "--no-pngs"])
    assert res.exit_code == 0, res.output
    assert out.is_file() and "residues" in res.output and "note: Knockout map left out" in res.output
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "x.json").write_text("{")
    res = runner.invoke(app, [str(bad), "--out", str(tmp_path / "bad.html")])
    assert res.exit_code == 1 and "x.json" in res.output and "not valid JSON" in res.output


def test_the_report_never_writes_over_its_results_and_a_full_disk_is_one_line(results, tmp_path, monkeypatch):
    import errno

    app = typer.Typer()
    app.command()(report_command)
    runner = CliRunner()
    folder = _copy(results, tmp_path, "flip.json")
    flip = folder / "flip.json"
    before = flip.read_text()
    for given, out in ((flip, flip), (folder, folder / "lookup.json")):
        res = runner.invoke(app, [str(given), "--out", str(out), "--no-pngs"])
        assert res.exit_code == 1 and "would overwrite" in res.output and "give --out a path outside it" in res.output
        assert len(res.output.strip().splitlines()) == 1
    assert flip.read_text() == before and not (folder / "lookup.json").exists()

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    res = runner.invoke(app, [str(flip), "--out", str(tmp_path / "r.html"), "--no-pngs"])
    assert res.exit_code == 1 and "No space left on device (free space" in res.output
    assert len(res.output.strip().splitlines()) == 1 and not (tmp_path / "r.html").exists()


def test_compressor_falls_back_to_illustrative_numbers_with_a_reason(results, tmp_path):
    full = save_checkpoint(_model("full-1kv"), tmp_path / "full")
    out = build_report(
        _copy(results, tmp_path, "flip.json"), tmp_path / "r.html", compressor=illustration(full), pngs=False
    )
    assert any("illustrative numbers" in n and "no compressor" in n for n in out.notes)


# ---------- in a real browser ----------


def test_report_in_headless_chromium(report, tmp_path):
    binary = browser()
    names = passed_selftest(binary, report, tmp_path / "profile")
    for fig_id in _figures(report.read_text()):  # every figure of the page drew marks
        assert f"figure {fig_id} renders" in names, fig_id
        assert f"figure {fig_id} has a text alternative" in names, fig_id
    for required in (
        "clicking a model row shows its panel alone",
        "the arrow keys walk the model rows",
        "the position figure follows the selected model",
        "the fold toggle changes the x axis",
        "the fold toggle restores the x axis",
        "clicking a knockout row selects it",
        "the step slider replays the training",
        "clicking an R² cell shows its δ",
        "prepending moves the followed token",
        "clicking a chip follows its token",
        "no errors on the page",
    ):
        assert required in names
    shot = screenshot(binary, report, tmp_path / "profile2", tmp_path / "report.png")
    try:
        shutil.copy(shot, SCREENSHOT)
    except OSError:
        pass


def test_report_refuses_no_results_other_json_and_an_unreadable_model(results, tmp_path):
    app = typer.Typer()
    app.command()(report_command)
    runner = CliRunner()
    empty = tmp_path / "empty"
    empty.mkdir()
    res = runner.invoke(app, [str(empty), "--out", str(tmp_path / "e.html")])
    assert res.exit_code == 1 and "no phasekv result files under" in res.output and not (tmp_path / "e.html").exists()
    other = _copy(results, tmp_path, "notes.json") / "notes.json"
    res = runner.invoke(app, [str(other), "--out", str(tmp_path / "o.html")])
    assert res.exit_code == 1 and "of another kind: notes.json" in res.output
    flip = str(_copy(results, tmp_path, "flip.json"))
    for model in (tmp_path / "missing", empty):
        res = runner.invoke(app, [flip, "--out", str(tmp_path / "m.html"), "--model", str(model), "--no-pngs"])
        assert res.exit_code == 1 and f"--model {model} cannot be read" in res.output, res.output
        assert not (tmp_path / "m.html").exists()


def test_ctrl_c_during_the_report_leaves_no_figures_without_their_page(results, tmp_path, monkeypatch):
    from phasekv.studies.gates import compressor_figure

    app = typer.Typer()
    app.command()(report_command)
    flip = str(_copy(results, tmp_path, "flip.json"))

    def interrupted(*_args):
        raise KeyboardInterrupt

    monkeypatch.setattr(compressor_figure, "png", interrupted)  # drawn after the studies' figures
    res = CliRunner().invoke(app, [flip, "--out", str(tmp_path / "r.html")])
    assert res.exit_code == 130 and "was not written" in res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["subset"]  # no page, no figures, no staging folder


# ---------- a report that opens on its finding: layout measured in headless Chromium ----------

WIDTHS = (1280, 1440, 1600)  # viewport widths at which nothing may leave the content column
PHASED = [58, 54, 51, 19, 56, 54, 52, 22]  # correct of 64 prompts by residue: a weak boundary phase S-1 at S = 4
VERDICT = {"verdict": "phase-sensitive", "effect_points": 52.5, "effect_ci": [41.25, 60.0], "p_value": 3e-7}
MDE = {"points": 12.5, "power": 0.8, "simulations": 200, "distinct_prompts": 77}


def _plant(source: Path, correct: list[int], label: str | None = None, model: dict | None = None) -> dict:
    """The lookup result at `source` with `correct` answers by residue planted (random models retrieve nothing),
    summary and phase verdict made consistent with it; `label` renames it, `model` replaces its model record."""
    data = json.loads(source.read_text())
    s = data["summary"]
    s["successes"] = correct
    accuracy = [c / n for c, n in zip(correct, s["counts"], strict=True)]
    mean, worst, best = sum(accuracy) / len(accuracy), min(accuracy), max(accuracy)
    s.update(accuracy=accuracy, ci_low=[a - 0.05 for a in accuracy], ci_high=[a + 0.05 for a in accuracy])
    s.update(mean=mean, worst=worst, best=best, gap_points=100 * (best - worst), period_difference_points=3.0)
    s.update(worst_residue=accuracy.index(worst), best_residue=accuracy.index(best))
    s["stat_intervals"].update(mean=[mean - 0.03, mean + 0.03], gap_points=[40.0, 66.0])
    stride = s["stride"] or s["modulus"]
    if s["fold"]:
        s["fold"]["accuracy"] = [sum(accuracy[p::stride]) / len(accuracy[p::stride]) for p in range(stride)]
    data.pop("cell_accuracy", None)
    data["phase_test"].update(VERDICT, period=stride, mde=MDE)
    if label is not None:
        data.update(label=label, run=label)
    data["model"] = model or data["model"]
    return data


@pytest.fixture(scope="module")
def layout_report(results, tmp_path_factory) -> Path:
    """The report of the module's results with the findings a layout must hold planted: three compressed models
    with a weak phase and a long verdict, a served model's audit (named only by the endpoint's model name), a
    knockout of two rows whose clean accuracy is 0 at phase 0. No PNGs: the browser draws the page."""
    root = tmp_path_factory.mktemp("layout")
    shutil.copytree(results, root / "results")
    probes = root / "results" / "results"
    for name in ("w8s4-1kv", "w8s8-1kv"):
        write_results(_plant(probes / f"{name}.json", PHASED), probes / f"{name}.json")
    second = _plant(probes / "w8s4-1kv.json", PHASED[::-1], label="w8s4-1kv · seed 1")
    write_results(second, probes / "w8s4-1kv-seed1.json")
    endpoint = {"kind": "endpoint", "endpoint": "http://127.0.0.1:8000/v1", "served_model": "w8s8"}
    endpoint["compression_stride"] = 8
    served = _plant(probes / "w8s8-1kv.json", PHASED, model=endpoint)
    for key in ("label", "run", "preset", "training"):
        served.pop(key)
    write_results(served, root / "results" / "audit" / "lookup.json")
    knock = json.loads((root / "results" / "analysis" / "knockout.json").read_text())
    knock["targets"] = knock["targets"][:2]
    knock["clean"]["accuracy_by_phase"] = [0.0, 0.5, 0.6, 0.7, 0.5, 0.6, 0.7, 0.4]
    for target in knock["targets"]:
        target["relative_change_by_phase"][0] = None  # no relative change where clean accuracy is 0
    write_results(knock, root / "results" / "analysis" / "knockout.json")
    out = root / "report" / "report.html"
    build_report(root / "results", out, pngs=False)
    return out


@pytest.fixture(scope="module")
def layout(layout_report) -> dict:
    """The page measured at every width of WIDTHS, in one headless Chromium run (`report_layout.js`)."""
    binary = browser()
    harness = layout_report.parent / "layout.html"
    script = (ROOT / "tests" / "report" / "report_layout.js").as_uri()
    harness.write_text(
        f'<!DOCTYPE html><html><body style="margin:0"><pre id="layout-result" data-report="{layout_report.name}" '
        f"data-widths='{json.dumps(WIDTHS)}'></pre><script src=\"{script}\"></script></body></html>"
    )
    profile = layout_report.parent / "profile"
    size = f"--window-size={max(WIDTHS) + 100},1000"
    dom = run_chromium(binary, profile, "--allow-file-access-from-files", size, "--dump-dom", harness.as_uri())
    measured = dumped(dom, "layout-result")
    assert "error" not in measured, measured
    return measured


def _solid(dash: str) -> str:
    return "" if dash in ("", "1,0") else dash


def test_the_report_opens_on_its_summary_then_the_residue_figure(layout):
    for width in layout["widths"]:
        order = [name for name, _ in width["sections"]]
        assert order[:3] == ["sec-summary", "sec-residues", "sec-flip"], (width["viewport"], order)
        tops = [top for _, top in width["sections"]]
        assert tops == sorted(tops) and tops[0] < 300, width["sections"]  # the summary opens the page
    mean, gap = 100 * sum(PHASED) / (64 * len(PHASED)), 100 * (max(PHASED) - min(PHASED)) / 64
    effect = "{:.1f} [{:.1f}, {:.1f}] points".format(VERDICT["effect_points"], *VERDICT["effect_ci"])
    planted = [f"{mean:.1f} [{mean - 3:.1f}, {mean + 3:.1f}]", f"{gap:.1f} [40.0, 66.0]", VERDICT["verdict"], effect]
    rows = {row[0]: row[1:] for row in layout["summary"]}
    for name in ("w8s8", "w8s4-1kv · seed 1", "w8s4-1kv", "w8s8-1kv"):  # each model: mean, gap, verdict, effect, MDE
        assert rows[name] == [*planted, f"{MDE['points']:g}"], (name, rows[name])
    assert rows["full-1kv not shown above guessing"][2] == "not judged: at chance"  # a random model guesses


def test_nothing_leaves_the_content_column_at_common_widths(layout):
    assert [width["viewport"] for width in layout["widths"]] == list(WIDTHS)
    for width in layout["widths"]:
        assert width["content"][1] - width["content"][0] > 900, width["content"]
        assert not width["spill"], f"at {width['viewport']} px, outside {width['content']}: {width['spill'][:6]}"


def test_legend_swatches_are_the_marks_they_name(layout):
    """A legend entry shows its marks' colour and, where the figure tells its series apart by dash, their dash, at
    their opacity."""
    checked = {}
    for fig_id, figure in layout["figures"].items():
        for legend in {entry["legend"] for entry in figure["legends"]}:
            entries = [entry for entry in figure["legends"] if entry["legend"] == legend]
            checked.setdefault(fig_id, []).extend(_check_legend(fig_id, entries, figure["marks"]))
    assert {"model", "full attention, not learned"} <= set(checked["fig-residues"]), checked
    assert {"static", "per window"} <= set(checked["fig-theory"]), checked


def _check_legend(fig_id: str, entries: list[dict], marks: list[dict]) -> list[str]:
    """The labels of a legend's entries checked against the marks that carry their label (the lines, where a
    label has lines): colour in a legend of colours, dash where the figure tells series apart by dash."""
    named = [(entry, [m for m in marks if entry["label"] in m["values"]]) for entry in entries]
    named = [(entry, [m for m in found if m["line"]] or found) for entry, found in named if found]
    dashes = {frozenset(_solid(m["dash"]) for m in found) for _, found in named}
    colour_legend = len({entry["colour"] for entry, _ in named}) > 1
    for entry, marks in named:
        colours, dash = {m["colour"] for m in marks}, {_solid(m["dash"]) for m in marks}
        if colour_legend and len(colours) == 1:
            assert entry["colour"] in colours, (fig_id, entry, colours)
        if len(dashes) > 1 and len(dash) == 1:
            assert _solid(entry["dash"]) in dash, (fig_id, entry, dash)
        assert entry["opacity"] >= 0.9 * max(m["opacity"] for m in marks), (fig_id, entry, marks[:2])
    return [entry["label"] for entry, _ in named]


def test_residue_axis_titles_say_what_the_axis_shows(layout, results, tmp_path):
    titles = layout["figures"]["fig-residues"]["axes"]
    assert [t for t in titles if t != "accuracy (%)"] == ["target position mod 8"] * 4, titles  # four panels
    folded = [t for t in layout["folded_axes"] if t != "accuracy (%)"]
    assert folded and all(t.endswith("periods overlaid") and "mod 8" not in t for t in folded), folded
    one = residues.spec(residues.section(load_results(_copy(results, tmp_path, "results/w8s4-1kv.json"))))
    for param in one["params"]:
        param["value"] = True if param["name"] == "fold" else param["value"]
    svg = vl_convert.vegalite_to_svg(one, vl_version=VEGALITE_VERSION)
    assert "target position mod 4, periods overlaid" in svg and "mod M" not in svg and "folded:" not in svg


def test_an_audit_of_a_served_model_is_named_by_the_model_it_serves(layout_report, layout):
    rows = _values(_spec(layout_report.read_text(), "fig-residues"))
    models = {row["model"] for row in rows if row["kind"] == "series"}
    assert "w8s8" in models and not any("audit" in m or "lookup" in m for m in models), models
    assert "w8s8" in [row[0] for row in layout["summary"]]


def test_knockout_map_is_readable_at_a_glance(layout):
    drawn = layout["knockout"]
    cells = [i for m in drawn["marks"][:2] for i in m["items"]]  # the heatmaps by residue and by phase
    assert len(cells) == 2 * 2 * 8 and {i["datum"]["kind"] for i in cells} == {"residue", "phase"}
    assert min(i["height"] for i in cells) >= 20 and min(i["width"] for i in cells) >= 24, cells[:2]
    (phases,) = [a for a in drawn["axes"] if a.get("title", "").startswith("position mod")]
    assert phases["labels"] == [str(p) for p in range(8)]  # every phase has its place
    bars = [i["datum"]["position"] for m in drawn["marks"] for i in m["items"] if "change_start" in i["datum"]]
    assert sorted(bars) == list(range(1, 8))  # a bar for every phase with a relative change
    marked = [t["datum"]["position"] for t in drawn["texts"] if t["text"] == "clean 0"]
    assert marked == [0]  # and the phase at clean accuracy 0 says so


def test_the_knockout_png_draws_the_row_it_names(results, tmp_path, monkeypatch):
    inputs = load_results(results)
    drawn = []
    monkeypatch.setattr(vega, "write_png", lambda spec, path: drawn.append(spec) or Path(path))
    knockout.png(knockout.section(inputs), inputs, tmp_path)
    (spec,) = drawn
    svg = vl_convert.vegalite_to_svg(spec, vl_version=VEGALITE_VERSION)
    assert "click" not in svg.lower()  # a picture cannot be clicked
    first = head_label(inputs.of("knockout")[0].data["targets"][0])
    assert f"{first}'s change by phase" in svg
    changes = [v for v in inputs.of("knockout")[0].data["targets"][0]["relative_change_by_phase"] if v is not None]
    bars = re.findall(r'aria-roledescription="bar" d="[^"]*" fill="(#b2182b|#2166ac)"', svg)  # lost, gained
    assert len(bars) == len(changes) == 8, bars  # its change at every phase


def test_the_theory_section_speaks_percent_and_titles_hold_no_paths(results):
    block = theory.section(load_results(results))
    (run,) = block["runs"]
    title = theory.spec(run)["title"]
    assert "/" not in title and "theorem2" not in title and title.startswith("Theorem 2"), title
    page = theory.section_html(block)
    sweep = json.loads((results / "theory" / "sweep.json").read_text())
    for column in ("concentrated (%)", "full coverage (%)", "accuracy (%)", "worst position (%)"):
        assert f"<th>{column}</th>" in page
    for row in sweep["table"]:
        assert f"<td>{100 * row['accuracy_mean']:.4g}</td>" in page
        assert f"<td>{100 * row['min_position_accuracy_mean']:.4g}</td>" in page
