"""`phasekv knockout | gates | cycle` through typer on tiny checkpoints."""

import json

import pytest
import torch
from typer.testing import CliRunner

from analysis_helpers import LOOKUP, SMALL, V, planted_model, random_model
from conftest import save_with_tokenizer, tiny_qwen3
from phasekv.studies.gates.run import run_gate_trajectory
from phasekv.train.gates import gate_snapshot, write_snapshot


@pytest.fixture(scope="module")
def app():
    from phasekv.cli import app  # the `phasekv` command itself, with every subcommand mounted

    return app


def test_cli_commands_on_tiny_checkpoints(app, tmp_path):
    runner = CliRunner()
    planted = save_with_tokenizer(planted_model(), tmp_path / "w8s8")
    out = tmp_path / "out"
    res = runner.invoke(app, ["knockout", str(planted), "--calibration-mappings", "2", "--out", str(out), *SMALL])
    assert res.exit_code == 0, res.output
    assert "L1H0" in res.output and (out / "knockout.json").is_file() and (out / "knockout.png").is_file()

    qwen = save_with_tokenizer(tiny_qwen3(V), tmp_path / "qwen3")
    res = runner.invoke(app, ["knockout", str(qwen), "--layers", "--out", str(out / "hf"), *SMALL])
    assert res.exit_code == 0, res.output
    assert json.loads((out / "hf" / "knockout.json").read_text())["mode"] == "layers"
    # the natural template (pretrained LMs' " cat: Bob," lists) reaches the prompts
    res = runner.invoke(
        app, ["knockout", str(qwen), "--layers", "--template", "natural", "--out", str(out / "nat"), *SMALL]
    )
    assert res.exit_code == 0, res.output
    assert json.loads((out / "nat" / "knockout.json").read_text())["options"]["template"] == "natural"

    res = runner.invoke(app, ["gates", str(planted), "--out", str(out), *SMALL])
    assert res.exit_code == 0 and (out / "gates.json").is_file(), res.output

    run_dir = tmp_path / "run"
    for step, seed in ((1, 1), (5, 2)):
        model = random_model("w8s8-1kv", seed=seed)
        ckpt = save_with_tokenizer(model, run_dir / "checkpoints" / f"step_{step:06d}")
        (ckpt / "trainer.pt").write_bytes(b"")
        write_snapshot(run_dir, gate_snapshot(model, model.config.compression, torch.randint(5, V, (2, 32)), step))
    for source in ("checkpoints", "snapshots"):
        res = runner.invoke(app, ["gates", str(run_dir), "--source", source, "--out", str(out / source), *SMALL])
        assert res.exit_code == 0, res.output
        trajectory = json.loads((out / source / "gate_trajectory.json").read_text())
        assert [s["step"] for s in trajectory["steps"]] == [1, 5] and trajectory["source"] == source
    assert run_gate_trajectory(run_dir, LOOKUP, source="auto", progress=False)["source"] == "checkpoints"

    args = ["cycle", str(planted), "--delta", "-1..1", "--resamples", "20", "--out", str(out)]
    res = runner.invoke(app, [*args, *SMALL])
    assert res.exit_code == 0 and "R^2" in res.output and (out / "cycle.png").is_file(), res.output

    w8s4 = save_with_tokenizer(random_model("w8s4-1kv"), tmp_path / "w8s4")
    res = runner.invoke(app, ["cycle", str(w8s4), "--out", str(out), *SMALL])
    assert res.exit_code == 2 and "W = S" in res.output and len(res.output.strip().splitlines()) == 1
