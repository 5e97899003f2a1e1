"""Commands that write check where they write before any work, and a refused `train` leaves nothing behind."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from phasekv.cli import app
from phasekv.files import check_output


def _no_model(*_args, **_kwargs):
    raise AssertionError("the model was loaded before the output path was checked")


@pytest.fixture
def a_file(tmp_path):
    path = tmp_path / "afile"
    path.write_text("not a folder")
    return path


def test_check_output_accepts_what_can_be_made_and_refuses_the_rest(tmp_path, a_file):
    assert check_output(tmp_path / "new" / "deeper" / "r.json") == tmp_path / "new" / "deeper" / "r.json"
    assert check_output(tmp_path / "new", directory=True) == tmp_path / "new"
    assert not (tmp_path / "new").exists()  # nothing is created
    with pytest.raises(ValueError, match="afile is a file, so no file can be made under it"):
        check_output(a_file / "r.json")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        check_output(a_file, directory=True)
    with pytest.raises(ValueError, match="is a folder: give a file name"):
        check_output(tmp_path)
    if os.geteuid() != 0:  # root may write anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(ValueError, match="is not writable"):
            check_output(locked / "r.json")


@pytest.mark.parametrize(
    "command",
    [
        ["eval", "lookup", "{model}", "--records", "4", "--out", "{bad}/r.json"],
        ["eval", "needle", "{model}", "--out", "{bad}/r.json"],
        ["eval", "flip", "{model}", "--out", "{bad}/r.json"],
        ["eval", "lookup", "{model}", "--dump-prompts", "{bad}/p.jsonl"],
        ["knockout", "{model}", "--out", "{bad}/k"],
        ["gates", "{model}", "--out", "{bad}"],
        ["cycle", "{model}", "--out", "{bad}/c"],
        ["theory", "theorem1", "--out", "{bad}/t.json"],
        ["theory", "sweep", "--out", "{bad}/t.json"],
        ["train", "--out", "{bad}/run", "--steps", "3"],
        ["reproduce", "--out", "{bad}/runs", "--profile", "quick"],
    ],
)
def test_a_bad_output_path_fails_before_the_model_is_loaded(command, phasekv_dir, a_file, monkeypatch):
    monkeypatch.setattr("phasekv.scoring.load_scorer", _no_model)
    monkeypatch.setattr("phasekv.model.load_checkpoint", _no_model)
    monkeypatch.setattr("phasekv.train.loop.train", _no_model)
    monkeypatch.setattr("phasekv.reproduce.reproduce", _no_model)
    args = [arg.format(model=phasekv_dir, bad=a_file) for arg in command]
    run = CliRunner().invoke(app, args)
    assert run.exit_code == 2, run.output
    assert "afile" in run.output and ("is a file" in run.output)
    assert len(run.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "refused",
    [["--batch-size", "2", "--seq-len", "32"], ["--batch-size", "3", "--accum-steps", "2", "--seq-len", "64"]],
)
def test_a_refused_train_leaves_nothing_so_the_corrected_command_runs(tmp_path, refused):
    out = tmp_path / "D"
    base = ["train", "--out", str(out), "--steps", "3", "--no-progress", "--val-batches", "1"]
    run = CliRunner().invoke(app, [*base, *refused])
    assert run.exit_code != 0 and not out.exists(), run.output
    run = CliRunner().invoke(app, [*base, "--batch-size", "2", "--seq-len", "64"])
    assert run.exit_code == 0, run.output
    assert (out / "checkpoints" / "final").exists()


def test_train_refuses_nan_lr_and_resume_of_no_run_before_writing(tmp_path):
    """Issue 53: `train --lr nan` left run.json and tokenizer/ behind; `--resume` on a missing folder started fresh."""
    from typer.testing import CliRunner

    from phasekv.cli import app

    out = tmp_path / "run"
    refused = CliRunner().invoke(app, ["train", "--out", str(out), "--lr", "nan", "--steps", "1"])
    assert refused.exit_code == 2 and "need lr > 0" in refused.output and not out.exists(), refused.output
    missing = CliRunner().invoke(app, ["train", "--out", str(out), "--resume", "--steps", "1"])
    assert missing.exit_code == 2 and "holds no run" in missing.output and not out.exists(), missing.output
    assert len(missing.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["gates", "{model}", "--source", "nosuch", "--out", "{tmp}/g"], "unknown --source 'nosuch'"),
        (["gates", "{model}", "--source", "snapshots", "--out", "{tmp}/g"], "applies to a training run directory"),
        (["reproduce", "--jobs", "-3", "--out", "{tmp}/r", "--plan"], "--jobs"),
    ],
)
def test_options_out_of_range_are_refused_before_any_work(command, message, phasekv_dir, tmp_path, monkeypatch):
    """Issue 53: `gates --source nosuch` on a checkpoint and `reproduce --jobs -3` were accepted silently."""
    monkeypatch.setattr("phasekv.scoring.load_scorer", _no_model)
    run = CliRunner().invoke(app, [arg.format(model=phasekv_dir, tmp=tmp_path) for arg in command])
    assert run.exit_code == 2 and message in run.output, run.output
    assert not (tmp_path / "g").exists() and not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "command",
    [
        ["eval", "lookup", "{model}", "--records", "4"],
        ["eval", "needle", "{model}"],
        ["audit", "{model}", "--out", "{tmp}/audit"],
    ],
)
@pytest.mark.parametrize(
    ("cache", "message"), [("{tmp}", "is a folder: give a file name"), ("{file}/c.jsonl", "is a file")]
)
def test_a_cache_that_cannot_be_written_is_one_line_before_anything_is_sent(
    command, cache, message, phasekv_dir, a_file, tmp_path
):
    """Issue 53: `--cache` naming a folder, or a place that cannot be written, ended in a traceback."""
    endpoint = ["--endpoint", "http://127.0.0.1:9", "--served-model", "m", "--cache", cache]  # nothing listens
    args = [arg.format(model=phasekv_dir, tmp=tmp_path, file=a_file) for arg in [*command, *endpoint]]
    run = CliRunner().invoke(app, args)
    assert run.exit_code == 2 and f"--cache {args[-1]}" in run.output and message in run.output, run.output
    assert len(run.output.strip().splitlines()) == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_a_cache_in_a_read_only_folder_is_one_line(phasekv_dir, tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    args = ["eval", "lookup", str(phasekv_dir), "--endpoint", "http://127.0.0.1:9", "--served-model", "m"]
    run = CliRunner().invoke(app, [*args, "--cache", str(locked / "c.jsonl")])
    assert run.exit_code == 2 and "is not writable" in run.output, run.output


@pytest.mark.parametrize(
    ("command", "advice"),
    [
        (["eval", "lookup", "{model}", "--records", "4", "--demos", "2", "--modulus", "1000000000"], "lower --modulus"),
        (
            ["eval", "lookup", "{model}", "--records", "4", "--demos", "2", "--mappings", "1000000000"],
            "lower --mappings",
        ),
        (["eval", "needle", "{model}", "--haystacks", "1000000000"], "lower --haystacks"),
        (["knockout", "{model}", "--modulus", "1000000000", "--out", "{tmp}/k"], "lower --modulus"),
        (["train", "--out", "{tmp}/run", "--batch-size", "1000000000000", "--steps", "1"], "lower --batch-size"),
        (["train", "--out", "{tmp}/run", "--seq-len", "1000000000", "--steps", "1"], "or --seq-len"),
    ],
)
def test_a_size_too_large_for_memory_is_one_line_before_it_is_allocated(command, advice, phasekv_dir, tmp_path):
    """Issue 53: huge --modulus, --seq-len, --haystacks ended in MemoryError; `train --batch-size 10**12` hung."""
    start = time.perf_counter()
    run = CliRunner().invoke(app, [arg.format(model=phasekv_dir, tmp=tmp_path) for arg in command])
    assert run.exit_code == 2 and "of memory, more than the" in run.output and advice in run.output, run.output
    assert len(run.output.strip().splitlines()) == 1 and time.perf_counter() - start < 60
    assert not (tmp_path / "run").exists()


def test_check_fits_names_both_sizes_and_what_to_lower():
    from phasekv.memory import check_fits

    check_fits(10**9, "a thing", "lower --x", available=2 * 10**9)
    with pytest.raises(
        ValueError, match=r"^a thing needs about 3 GB of memory, more than the 2 GB available: lower --x$"
    ):
        check_fits(3 * 10**9, "a thing", "lower --x", available=2 * 10**9)


SMALL_LOOKUP = ["--records", "4", "--demos", "2", "--mappings", "2", "--modulus", "2", "--quiet"]


class _FullDisk:
    """`os` for phasekv.files, whose rename of a written file finds the disk full."""

    def __getattr__(self, name):
        return getattr(os, name)

    @staticmethod
    def replace(*_args):
        raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize(
    ("command", "written"),
    [
        # the answer cache's own full disk is the same one line, naming that file
        (
            ["eval", "lookup", "{model}", *SMALL_LOOKUP, "--no-cache", "--resamples", "10", "--out", "{out}/r.json"],
            "r.json",
        ),
        (["knockout", "{model}", *SMALL_LOOKUP, "--calibration-mappings", "2", "--out", "{out}"], "knockout.json"),
        (["conformance", "{model}", "--prompts", "1", "--length", "16", "--modes", "parallel", "--out", "{out}"], ""),
        (["report", "{result}", "--out", "{out}/report.html", "--no-pngs"], "report.html"),
        (["train", "--out", "{out}", "--steps", "2", "--batch-size", "2", "--seq-len", "64", "--no-progress"], ""),
    ],
)
def test_a_full_disk_is_one_line_and_leaves_nothing_half_written(command, written, phasekv_dir, tmp_path, monkeypatch):
    """Issue 53: a full disk gave a traceback in eval, knockout, report, train and conformance."""
    result = tmp_path / "result" / "conformance.json"  # a result for the report to read
    if "report" in command:
        made = ["conformance", str(phasekv_dir), "--prompts", "1", "--length", "16", "--modes", "parallel"]
        assert CliRunner().invoke(app, [*made, "--out", str(result.parent)]).exit_code == 0
    out = tmp_path / "out"
    monkeypatch.setattr("phasekv.files.os", _FullDisk())
    run = CliRunner().invoke(app, [arg.format(model=phasekv_dir, out=out, result=result) for arg in command])
    assert run.exit_code in (1, 2), run.output
    error = run.output.strip().splitlines()[-1]
    assert f"{out}/{written}" in error and "No space left on device" in error, run.output
    assert "Traceback" not in run.output and not out.exists()  # no file, no temporary file, no empty folder


def test_a_disk_that_fills_during_training_is_one_line_and_keeps_no_partial_checkpoint(tmp_path, monkeypatch):
    out = tmp_path / "run"
    monkeypatch.setattr("phasekv.files.shutil", SimpleNamespace(disk_usage=lambda _: SimpleNamespace(free=100_000)))
    args = ["train", "--out", str(out), "--steps", "2", "--batch-size", "2", "--seq-len", "64", "--no-progress"]
    run = CliRunner().invoke(app, args)
    assert run.exit_code == 2 and len(run.output.strip().splitlines()) == 1, run.output
    assert "cannot write checkpoint" in run.output and "0.1 MB free" in run.output
    assert [p.name for p in (out / "checkpoints").iterdir()] == []  # resumable with --resume once space is freed


def test_a_disk_already_full_is_said_before_any_work(tmp_path, monkeypatch):
    """The issue's eval scored everything, then could not write its result on a full disk."""
    monkeypatch.setattr("phasekv.files.shutil", SimpleNamespace(disk_usage=lambda _: SimpleNamespace(free=1024)))
    with pytest.raises(ValueError, match=r"--out .*r.json: the disk of .* is full \(1 kB free\); free space first"):
        check_output(tmp_path / "new" / "r.json")
    with pytest.raises(ValueError, match="is full"):
        check_output(tmp_path, directory=True)


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (
            ["eval", "lookup", "--like", "{like}", "--out", "{like}"],
            "--out {like} would overwrite this command's input",
        ),
        (["eval", "needle", "--like", "{like}", "--dump-prompts", "{like}"], "--dump-prompts {like} would overwrite"),
        (["eval", "lookup", "{model}", "--out", "{tmp}/x", "--dump-prompts", "{tmp}/x"], "both name {tmp}/x"),
        (["conformance", "{copy}", "--out", "{copy}", "--name", "config"], "would overwrite this command's input"),
    ],
)
def test_no_command_overwrites_its_own_input(command, message, phasekv_dir, tmp_path, monkeypatch):
    """Issue 53: besides report and rejudge, `eval --like X --out X` replaced the result it was told to repeat."""
    import shutil

    monkeypatch.setattr("phasekv.scoring.load_scorer", _no_model)
    monkeypatch.setattr("phasekv.studies.conformance.run.load_runner", _no_model)
    like, copy = tmp_path / "like.json", tmp_path / "model"
    like.write_text('{"probe": "lookup"}')
    shutil.copytree(phasekv_dir, copy)
    before = {p.name: p.read_bytes() for p in copy.iterdir()}
    names = dict(model=phasekv_dir, like=like, tmp=tmp_path, copy=copy)
    run = CliRunner().invoke(app, [arg.format(**names) for arg in command])
    assert run.exit_code == 2 and message.format(**names) in run.output, run.output
    assert like.read_text() == '{"probe": "lookup"}' and {p.name: p.read_bytes() for p in copy.iterdir()} == before


def test_an_analysis_may_write_beside_the_model_and_replace_its_own_earlier_result(phasekv_dir, tmp_path):
    import shutil

    copy = shutil.copytree(phasekv_dir, tmp_path / "model")
    args = ["knockout", str(copy), *SMALL_LOOKUP, "--calibration-mappings", "2", "--out", str(copy)]
    for _ in range(2):
        run = CliRunner().invoke(app, args)
        assert run.exit_code == 0 and "wrote" in run.output, run.output


def test_a_local_eval_stopped_by_a_full_disk_resumes_from_its_answer_cache(
    phasekv_dir, qwen_dir, tmp_path, monkeypatch
):
    """A local run that scored everything and then found the disk full lost every score; now its answers are kept as
    they are scored, and the rerun after space is freed scores nothing again and writes the same result."""
    import json

    args = ["eval", "lookup", str(phasekv_dir), *SMALL_LOOKUP, "--resamples", "10", "--out", str(tmp_path / "r.json")]

    def fills_the_disk(_result, path):
        from phasekv.files import disk_errors

        with disk_errors(path):
            raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patched:  # space enough when checked first, none left for the result
        patched.setattr("phasekv.results.record.write_results", fills_the_disk)
        full = CliRunner().invoke(app, args)
    assert full.exit_code in (1, 2) and "No space left on device" in full.output and not (tmp_path / "r.json").exists()

    resumed = CliRunner().invoke(app, args)
    assert resumed.exit_code == 0, resumed.output
    kept = json.loads((tmp_path / "r.json").read_text())["scoring"]["answers"]
    assert kept["scored"] == 0 and kept["from_cache"] > 0, kept
    assert f"answers: {kept['from_cache']} from the answer cache ({kept['cache']}), 0 scored" in resumed.output
    cache = Path(kept["cache"])
    assert cache.parent == Path(os.environ["XDG_CACHE_HOME"]) / "phasekv" / "answers"

    fresh = CliRunner().invoke(app, [*args[:-1], str(tmp_path / "fresh.json"), "--no-cache"])
    assert fresh.exit_code == 0, fresh.output
    records = [json.loads((tmp_path / name).read_text())["prompt_records"] for name in ("r.json", "fresh.json")]
    assert records[0] == records[1]  # answers read back are the answers computed

    another_model = [*args[:2], str(qwen_dir), *args[3:-1], str(tmp_path / "q.json"), "--cache", str(cache)]
    other = CliRunner().invoke(app, another_model)
    assert other.exit_code != 0 and "another server or model (differs in: model" in other.output, other.output
    assert "Traceback" not in other.output and not (tmp_path / "q.json").exists()
