"""`--like RUN_OR_RESULT`: a table row re-measured with the command the table prints gives the row's numbers; flags
given beside it override the recorded options; the wrong probe's result is refused."""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import asdict

import pytest
from typer.testing import CliRunner

import phasekv
from phasekv.cli import app
from phasekv.reproduce.report import markdown_table, table_rows
from phasekv.results.record import write_results
from phasekv.scoring import load_scorer
from phasekv.studies.probe.like import eval_command, recorded
from phasekv.studies.probe.result import ProbeResult
from phasekv.studies.probe.run import run_lookup
from phasekv.tasks.lookup import LookupOptions

# not the command's defaults, so a re-run that missed any of them scores other prompts
OPTIONS = LookupOptions(n_records=8, n_demos=2, modulus=8, n_mappings=3, spread_blocks=2, held_out_seed=0)
NAME = "w8s4-tiny-s0"


@pytest.fixture(scope="module")
def profile(phasekv_dir, tmp_path_factory):
    """A profile folder as `phasekv reproduce` leaves it: runs/NAME/checkpoints/final and results/NAME.json."""
    root = tmp_path_factory.mktemp("profile")
    checkpoint = root / "runs" / NAME / "checkpoints" / "final"
    shutil.copytree(phasekv_dir, checkpoint)
    result = run_lookup(load_scorer(checkpoint), OPTIONS, n_resamples=40, progress=False)
    result.update(
        checkpoint=str(checkpoint.resolve()),
        run=NAME,
        label="W8/S4 tiny",
        lookup_options=asdict(OPTIONS),
        training={"final_val_loss": None},
    )
    write_results(result, root / "results" / f"{NAME}.json")
    return root, result


def _measured(path) -> dict:
    r = ProbeResult.load(path)
    return {
        "options": r.options,
        "logprob": r.extra("mean_answer_logprob"),
        "records": r.extra("prompt_records"),
        "summary": r.residue_summary.to_dict(),
    }


@pytest.mark.slow
def test_the_table_names_the_command_that_re_measures_its_row(profile, tmp_path):
    root, result = profile
    rows = table_rows({NAME: result}, root / "results")
    table = markdown_table(rows)
    commands = re.findall(r"`(phasekv eval lookup [^`]*)`", table)
    assert commands == [f"phasekv eval lookup --like {root / 'results' / f'{NAME}.json'}"]
    out = tmp_path / "again.json"
    run = CliRunner().invoke(app, [*shlex.split(commands[0])[1:], "--out", str(out), "--quiet"])
    assert run.exit_code == 0, run.output
    again, before = _measured(out), _measured(root / "results" / f"{NAME}.json")
    assert again == before  # the same prompts, answers, log-probs and statistics
    row = rows[0]
    assert f"| {row['mean']:.1f} | {row['worst']:.1f} |" in table
    assert round(100 * again["summary"]["mean"], 1) == round(row["mean"], 1)
    # without --like, every option but the held-out pairs spelled out, the same checkpoint scores other prompts
    default = tmp_path / "default.json"
    design = "--records 8 --demos 2 --modulus 8 --mappings 3 --spread-blocks 2 --resamples 40 --quiet".split()
    assert (
        CliRunner().invoke(app, ["eval", "lookup", result["checkpoint"], *design, "--out", str(default)]).exit_code == 0
    )
    assert _measured(default)["logprob"] != before["logprob"]


@pytest.mark.slow
def test_a_run_folder_and_flags_beside_it(profile, tmp_path):
    root, result = profile
    found = recorded(root / "runs" / NAME, "lookup")
    assert found.path == root / "results" / f"{NAME}.json" and found.options == asdict(OPTIONS)
    assert found.model == result["checkpoint"] and found.n_resamples == 40
    out = tmp_path / "fewer.json"
    run = CliRunner().invoke(
        app, ["eval", "lookup", "--like", str(root / "runs" / NAME), "--mappings", "2", "--out", str(out), "--quiet"]
    )
    assert run.exit_code == 0, run.output
    assert f"re-measure: phasekv eval lookup {result['checkpoint']} --like {out}" in run.output
    fewer = ProbeResult.load(out)
    assert fewer.options["n_mappings"] == 2
    assert {k: fewer.options[k] for k in ("n_records", "n_demos", "held_out_seed", "spread_blocks")} == {
        "n_records": 8,
        "n_demos": 2,
        "held_out_seed": 0,
        "spread_blocks": 2,
    }
    # the Python API reads the same record
    typed = phasekv.probe(like=root / "runs" / NAME)
    assert typed.extra("mean_answer_logprob") == result["mean_answer_logprob"]


def test_the_wrong_probe_or_a_missing_result_is_refused(profile, tmp_path):
    root, _ = profile
    refused = CliRunner().invoke(app, ["eval", "needle", "--like", str(root / "results" / f"{NAME}.json")])
    assert refused.exit_code == 2 and "is a lookup result, not a needle one" in refused.output
    missing = CliRunner().invoke(app, ["eval", "lookup", "--like", str(tmp_path)])
    assert missing.exit_code == 2 and "no lookup result for it" in missing.output


def test_eval_command_names_presses_and_served_models():
    assert eval_command({"kind": "hf", "path": "m", "press": {"spec": "knorm"}}, "lookup", "r.json") == (
        "phasekv eval lookup m --press knorm --like r.json"
    )
    served = {"kind": "endpoint", "endpoint": "http://h:1/v1", "served_model": "smol", "tokenizer": "tok"}
    assert eval_command(served, "needle", "n.json") == (
        "phasekv eval needle --endpoint http://h:1/v1 --served-model smol --tokenizer tok --like n.json"
    )
