"""The passkey probe: its prompts (exact positions, seeded keys, equal moments across residues), and the probe
through every door the registry opens: `phasekv.probe`, `phasekv eval passkey`, `--like`, rejudge, the audit and
the report."""

import json
from dataclasses import asdict

import pytest
from typer.testing import CliRunner

import phasekv
from conftest import SMALL_AUDIT, word_tokenizer
from phasekv.cli import app
from phasekv.results.record import prompt_prefix
from phasekv.studies.audit.options import AuditOptions
from phasekv.studies.probe.registry import question_tokens
from phasekv.studies.probe.rejudge import rejudge
from phasekv.studies.probes.passkey.haystack import passkey_prompts
from phasekv.studies.probes.passkey.options import PasskeyOptions

TOKENIZER = word_tokenizer()
PASSKEY = PasskeyOptions(context_length=96, digits=3, n_haystacks=2, modulus=4, spread_blocks=2, seed=3)
SMALL = dict(context_length=96, digits=3, n_haystacks=2, modulus=4, spread_blocks=2, seed=3, n_resamples=50)
ARGS = ["--context-length", "96", "--digits", "3", "--haystacks", "2", "--modulus", "4", "--spread-blocks", "2"]
runner = CliRunner()


def test_the_key_is_placed_at_every_residue_with_equal_moments_and_asked_back():
    built = passkey_prompts(TOKENIZER, PASSKEY, prompt_prefix(TOKENIZER))
    assert built.task == "passkey" and built.options["template"] == "plain"  # the word tokenizer lacks "pass"
    assert len(built.prompts) == 2 * 4 * built.options["placements_per_haystack"]
    stats = built.position_stats
    assert [s["residue"] for s in stats] == [0, 1, 2, 3]
    assert len({(s["count"], s["mean_target_position"], s["var_target_position"]) for s in stats}) == 1
    offset = built.options["answer_offset"]
    for p in built.prompts:
        assert len(p.input_ids) == PASSKEY.context_length == p.query_position + 1
        assert p.target_position % 4 == p.residue
        phrase = p.input_ids[p.target_position : p.target_position + offset]
        assert p.input_ids[-offset:] == phrase  # the question ends with the key phrase...
        assert p.input_ids[p.target_position + offset : p.target_position + offset + 3] == p.answer_ids  # ...its key
        assert TOKENIZER.decode(p.answer_ids).replace(" ", "").isdigit() and len(p.answer_ids) == 3
    keys = {p.unit: tuple(p.answer_ids) for p in built.prompts}
    again = passkey_prompts(TOKENIZER, PASSKEY, prompt_prefix(TOKENIZER))
    assert [p.input_ids for p in again.prompts] == [p.input_ids for p in built.prompts]  # seeded
    other = passkey_prompts(TOKENIZER, PasskeyOptions(**{**asdict(PASSKEY), "seed": 4}))
    assert {p.unit: tuple(p.answer_ids) for p in other.prompts} != keys
    assert question_tokens(TOKENIZER, PASSKEY) == len(TOKENIZER(" what is the number ? the number is").input_ids)


def test_bad_options_are_refused_in_one_line_before_scoring(phasekv_dir):
    with pytest.raises(ValueError, match="unknown passkey template 'fancy'"):
        PasskeyOptions(template="fancy")
    with pytest.raises(ValueError, match="holds words unknown to tokenizer"):
        passkey_prompts(TOKENIZER, PasskeyOptions(template="standard"))
    result = runner.invoke(app, ["eval", "passkey", str(phasekv_dir), "--context-length", "24"])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "filler tokens" in result.output and result.output.startswith("phasekv eval: error: ")


def test_the_api_the_command_like_and_rejudge_agree(phasekv_dir, tmp_path):
    result = phasekv.probe(phasekv_dir, "passkey", **SMALL)
    assert result.probe == "passkey" and result.seed == 3 and result.options["template"] == "plain"
    assert all(v for k, v in result.controls.items() if k != "query_positions")
    assert result.phase_test["chance"] == pytest.approx(2 / 900)  # three digits, the first not 0
    out = tmp_path / "passkey.json"
    cli = runner.invoke(
        app,
        ["eval", "passkey", str(phasekv_dir), *ARGS, "--seed", "3", "--resamples", "50", "--quiet", "--out", str(out)],
    )
    assert cli.exit_code == 0, cli.output
    assert (
        "passkey on" in cli.output and "3-digit keys" in cli.output and "re-measure: phasekv eval passkey" in cli.output
    )
    written = json.loads(out.read_text())
    assert written["summary"] == result.to_dict()["summary"] and written["phase_test"] == result.phase_test
    again = phasekv.probe(None, "passkey", like=out)  # the options (and the model) the result recorded
    assert again.to_dict()["summary"] == written["summary"]
    assert rejudge(written)["phase_test"] == written["phase_test"]


def test_the_audit_runs_the_probes_asked_for_and_reports_them(qwen_dir, tmp_path):
    options = {**SMALL_AUDIT, "needle": None, "probes": ("lookup", "passkey"), "haystacks": (2,), "modulus": 4}
    audit = phasekv.audit(qwen_dir, out=tmp_path / "a", budget="10m", anyway=True, needle_context_length=96, **options)
    assert list(audit.probes) == ["lookup", "passkey"] and audit.probe_result("passkey").probe == "passkey"
    assert "plan passkey:" in audit.summary and "re-measure: phasekv eval passkey" in audit.summary
    page = (tmp_path / "a" / "report.html").read_text()
    assert "passkey" in page
    with pytest.raises(ValueError, match="probes must be some of lookup, needle, passkey"):
        phasekv.audit(qwen_dir, out=tmp_path / "b", probes=("lookup", "keypass"))
    with pytest.raises(
        ValueError, match="--probes\\) or whether to run the needle \\(needle, --needle/--no-needle\\), not both"
    ):
        AuditOptions(probes=("passkey",), needle=True)
