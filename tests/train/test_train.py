"""The trainer: schedule, optimizer groups, atomic checkpoints, exact resume after SIGKILL, refusing a
different config, DDP (2 gloo processes) against one process, gate snapshots, and learning."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from conftest import small_config
from phasekv.compress.windows import WindowGeometry
from phasekv.corpus.tokens import write_header
from phasekv.model import PhaseKVModel, load_checkpoint
from phasekv.model.io import read_config
from phasekv.train import DataConfig, ModelSpec, OptimConfig, RunConfig, RunConfigError, read_log, train
from phasekv.train import checkpoint as ckpt
from phasekv.train.optim import decays, make_optimizer
from phasekv.train.regularize import GateCapture, capture_gates, record_windows, static_concentration, step_offset
from phasekv.train.schedule import learning_rate


def env_one_thread() -> dict:
    # faulthandler: a rank that crashes in native code prints its Python stacks
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}


def launch_failure(done: subprocess.CompletedProcess) -> str:
    """A failed torchrun's stderr: the head holds a crashed rank's own report, the tail torchrun's summary."""
    err = done.stderr
    return err if len(err) <= 6000 else f"{err[:3000]}\n[...]\n{err[-3000:]}"


def write_config(config: RunConfig, path) -> str:
    path.write_text(json.dumps(config.to_dict()))
    return str(path)


def losses(run_dir) -> list[tuple]:
    return [(r["step"], r["loss"], r["lr"], r["grad_norm"]) for r in read_log(run_dir) if "loss" in r]


def weights(checkpoint) -> dict[str, torch.Tensor]:
    return load_file(str(checkpoint / "model.safetensors"))


def test_schedule():
    o = OptimConfig(lr=1.0, warmup_steps=4, min_lr_fraction=0.1)
    assert [learning_rate(s, 14, o) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert learning_rate(4, 14, o) == 1.0
    assert learning_rate(13, 14, o) == pytest.approx(0.1)
    assert learning_rate(4 + 9 / 2, 14, o) == pytest.approx(0.1 + 0.9 * 0.5)
    assert learning_rate(8, 14, o) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 4 / 9)))
    assert learning_rate(0, 1, OptimConfig(lr=2.0, warmup_steps=0)) == 2.0


def test_weight_decay_on_matrices_only():
    model = PhaseKVModel(small_config().model_config(841))
    names = {n: decays(n, p) for n, p in model.named_parameters()}
    assert names["embed_tokens.weight"] and names["layers.0.mlp.up_proj.weight"]
    assert names["layers.0.self_attn.compressor.payload"] and names["layers.0.self_attn.compressor.gate_weight"]
    assert not names["layers.0.self_attn.compressor.gate_bias"] and not names["norm.weight"]
    groups = make_optimizer(model, OptimConfig(weight_decay=0.1)).param_groups
    assert [g["weight_decay"] for g in groups] == [0.1, 0.0]
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))


def test_partial_checkpoints_are_ignored(tmp_path, monkeypatch):
    model = PhaseKVModel(small_config().model_config(841))
    ckpt.save_training_checkpoint(tmp_path, 5, model, {"step": 5}, {"step": 5, "note": "x"})
    assert read_config(tmp_path / ckpt.CHECKPOINT_DIR / "step_000005")[1] == {"step": 5, "note": "x"}
    root = tmp_path / ckpt.CHECKPOINT_DIR
    killed = root / ".tmp-step_000010-abc"  # what a kill during a save leaves
    killed.mkdir()
    (killed / "config.json").write_text("{")
    no_state = root / "step_000009"  # a final name without trainer.pt (e.g. copied by hand)
    no_state.mkdir()
    for name in ("config.json", "model.safetensors"):
        (no_state / name).write_bytes((root / "step_000005" / name).read_bytes())
    assert ckpt.latest_checkpoint(tmp_path) == root / "step_000005"
    ckpt.remove_partial(tmp_path)
    assert not killed.exists()

    def crash(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ckpt.torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save_training_checkpoint(tmp_path, 6, model, {"step": 6})
    assert sorted(p.name for p in root.iterdir()) == ["step_000005", "step_000009"]
    monkeypatch.undo()
    for step in (6, 7):
        ckpt.save_training_checkpoint(tmp_path, step, model, {"step": step}, keep=2)
    assert [s for s, _ in ckpt.list_checkpoints(tmp_path)] == [6, 7]
    assert torch.equal(load_checkpoint(root / "step_000007").embed_tokens.weight, model.embed_tokens.weight)


@pytest.mark.slow
@pytest.mark.parametrize(
    "options", [{}, {"random_window_offset": True, "static_concentration_weight": 0.5}], ids=["plain", "mitigations"]
)
def test_resume_after_sigkill_is_bitwise_exact(tmp_path, options):
    config = small_config(steps=120, checkpoint_every=10, **options)
    killed = tmp_path / "killed"
    cmd = [sys.executable, "-m", "phasekv.train", "--config", write_config(config, tmp_path / "run.json")]
    errors = (tmp_path / "stderr.txt").open("w")
    proc = subprocess.Popen(
        [*cmd, "--out", str(killed), "--no-progress"], env=env_one_thread(), stdout=subprocess.DEVNULL, stderr=errors
    )
    deadline = time.monotonic() + 60
    while not ckpt.list_checkpoints(killed):
        assert proc.poll() is None, (tmp_path / "stderr.txt").read_text()
        assert time.monotonic() < deadline
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    saved = ckpt.list_checkpoints(killed)[-1][0]
    assert saved < config.steps and not (killed / "result.json").exists()

    resumed = train(config, killed, resume=True, progress=False)
    reference = train(config, tmp_path / "reference", progress=False)
    a, b = weights(resumed.checkpoint), weights(reference.checkpoint)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    state_a, state_b = (ckpt.load_trainer_state(r.checkpoint)["optimizer"]["state"] for r in (resumed, reference))
    assert all(torch.equal(state_a[i][k], state_b[i][k]) for i in state_a for k in ("exp_avg", "exp_avg_sq"))
    assert losses(killed) == losses(tmp_path / "reference")  # the log reads as if never stopped


def test_the_same_run_twice_trains_the_same_losses_and_weights(tmp_path):
    """Determinism on one machine: what lets a results document say its table repeats here to the digit."""
    config = small_config(steps=12, val_every=6)
    first, second = (train(config, tmp_path / name, progress=False) for name in ("first", "second"))
    assert losses(tmp_path / "first") == losses(tmp_path / "second") and len(losses(tmp_path / "first")) == 12
    vals = [[r["val_loss"] for r in read_log(tmp_path / name) if "val_loss" in r] for name in ("first", "second")]
    assert vals[0] == vals[1] and vals[0]
    a, b = weights(first.checkpoint), weights(second.checkpoint)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_run_dir_belongs_to_one_config(tmp_path):
    config = small_config("full-1kv", steps=2, gate_steps=(0, 2))
    first = train(config, tmp_path, progress=False)
    assert not (tmp_path / "gates").exists()  # full attention has no gates
    with pytest.raises(RunConfigError, match="already holds a run"):
        train(config, tmp_path, progress=False)
    with pytest.raises(RunConfigError, match=r"optim\.lr: run dir has 0\.003, requested 0\.01"):
        train(replace(config, optim=OptimConfig(lr=0.01, warmup_steps=2)), tmp_path, resume=True, progress=False)
    again = train(config, tmp_path, resume=True, progress=False)  # finished: nothing to do
    assert again.checkpoint == first.checkpoint and again.metrics == first.metrics


@pytest.mark.slow
def test_ddp_two_processes_match_one(tmp_path):
    config = small_config(steps=4, val_every=2)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd += ["-m", "phasekv.train", "--config", write_config(config, tmp_path / "run.json")]
    cmd += ["--out", str(tmp_path / "ddp"), "--no-progress"]
    done = subprocess.run(cmd, env=env_one_thread(), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, launch_failure(done)
    single = train(config, tmp_path / "one", progress=False)
    two, one = np.array(losses(tmp_path / "ddp")), np.array(losses(tmp_path / "one"))
    assert two.shape == one.shape == (4, 4)
    np.testing.assert_allclose(two, one, rtol=1e-5)
    vals = [[r["val_loss"] for r in read_log(tmp_path / d) if "val_loss" in r] for d in ("ddp", "one")]
    np.testing.assert_allclose(vals[0], vals[1], rtol=1e-6)
    a, b = weights(tmp_path / "ddp" / "checkpoints" / "step_000004"), weights(single.checkpoint)
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


@pytest.mark.slow
def test_fsdp_matches_one_process_and_resumes(tmp_path):
    config = small_config(steps=4, checkpoint_every=2, parallel="fsdp", gate_steps=(4,))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    cmd += ["-m", "phasekv.train", "--config", write_config(config, tmp_path / "run.json")]
    cmd += ["--out", str(tmp_path / "fsdp"), "--no-progress"]
    first = subprocess.run(cmd, env=env_one_thread(), capture_output=True, text=True, timeout=180)
    assert first.returncode == 0, launch_failure(first)
    final = tmp_path / "fsdp" / "checkpoints" / "step_000004"
    before = weights(final)
    shutil.rmtree(final)  # resume from step 2 (optimizer state gathered and re-sharded)
    again = subprocess.run([*cmd, "--resume"], env=env_one_thread(), capture_output=True, text=True, timeout=180)
    assert again.returncode == 0, launch_failure(again)
    after = weights(final)
    assert (tmp_path / "fsdp" / "gates" / "step_000004.json").is_file()
    assert all(torch.allclose(before[k], after[k], atol=1e-6) for k in before)
    single = train(replace(config, parallel="ddp"), tmp_path / "one", progress=False)
    np.testing.assert_allclose(np.array(losses(tmp_path / "fsdp")), np.array(losses(tmp_path / "one")), rtol=1e-5)
    assert all(torch.allclose(after[k], v, atol=1e-6) for k, v in weights(single.checkpoint).items())


def test_trains_on_token_files(tmp_path):
    rng = np.random.default_rng(0)
    for split, n in (("train", 4000), ("val", 500)):
        rng.integers(0, 300, n).astype(np.uint16).tofile(tmp_path / f"{split}.bin")
    write_header(tmp_path, 300, {"train": 4000, "val": 500}, {})
    config = small_config("full-1kv", steps=3, data=DataConfig(kind="tokens", tokens_dir=str(tmp_path)))
    result = train(config, tmp_path / "run", progress=False)
    assert load_checkpoint(result.checkpoint).config.vocab_size == 300
    assert np.isfinite(result.metrics["val_loss"]) and not (tmp_path / "run" / "tokenizer").exists()


def test_accumulation_matches_one_batch(tmp_path):
    one = train(small_config(steps=3), tmp_path / "one", progress=False)
    two = train(small_config(steps=3, accum_steps=2), tmp_path / "two", progress=False)
    np.testing.assert_allclose(np.array(losses(tmp_path / "two")), np.array(losses(tmp_path / "one")), rtol=1e-5)
    assert one.step == two.step == 3


@pytest.mark.slow
def test_short_run_learns_and_snapshots_gates(tmp_path):
    config = RunConfig(
        model=ModelSpec("w8s8-1kv", "tiny"),
        optim=OptimConfig(lr=3e-3, warmup_steps=10),
        steps=60,
        batch_size=8,
        seq_len=128,
        log_every=10,
        val_every=30,
        val_batches=2,
        checkpoint_every=0,
        gate_steps=(0, 60),
    )
    result = train(config, tmp_path, progress=False)
    log = read_log(tmp_path)
    train_losses = [r["loss"] for r in log if "loss" in r]
    assert train_losses[0] - train_losses[-1] > 0.8, train_losses
    assert result.metrics["val_loss"] < train_losses[0] - 0.8
    assert {"step", "loss", "lr", "grad_norm", "tokens_per_s"} <= set(log[0])
    for step in (0, 60):
        snap = json.loads((tmp_path / "gates" / f"step_{step:06d}.json").read_text())
        assert [layer["layer"] for layer in snap["layers"]] == [0, 1]
        for layer in snap["layers"]:
            for branch in ("key", "value"):
                means = np.array(layer[branch]["mean_by_offset"])
                assert means.shape == (1, 8) and np.allclose(means.sum(axis=1), 1, atol=1e-5)
                assert 1 <= layer[branch]["static_effective"][0] <= 8
    assert json.loads((tmp_path / "result.json").read_text())["step"] == 60
    extra = read_config(result.checkpoint)[1]
    assert extra["step"] == 60 and extra["run"] == config.to_dict() and extra["data"]["kind"] == "mixture"


def test_train_command(tmp_path):
    from typer.testing import CliRunner

    from phasekv.cli import app

    def run_train(args):
        return CliRunner().invoke(app, ["train", *args])

    out = str(tmp_path / "run")
    common = ["--out", out, "--no-progress"]
    options = ["--preset", "full-1kv", "--steps", "1", "--batch-size", "2", "--seq-len", "64", "--val-batches", "1"]
    first = run_train([*common, *options])
    assert first.exit_code == 0, first.output
    assert json.loads(first.output.strip().splitlines()[-1])["step"] == 1
    assert run_train([*common, "--resume"]).exit_code == 0  # the saved config
    other = run_train([*common, *options, "--lr", "0.01", "--resume"])
    assert other.exit_code == 2 and "optim.lr" in other.output
    both = run_train([*common, "--config", str(tmp_path / "run" / "run.json"), "--steps", "3"])
    assert both.exit_code == 2 and "not allowed" in both.output
    mitigated = ["--random-window-offset", "--static-concentration-weight", "0.1"]
    full = run_train(["--out", str(tmp_path / "m"), "--no-progress", *options, *mitigated])
    assert full.exit_code == 2 and "need a compressed model" in full.output


def _gated_model(bias: torch.Tensor | None = None) -> PhaseKVModel:
    """A small W8/S8 model; with `bias` [W], every gate's logits are that bias alone (no input term)."""
    model = PhaseKVModel(small_config().model_config(50))
    if bias is not None:
        with torch.no_grad():
            for layer in model.layers:
                layer.self_attn.compressor.gate_weight.zero_()
                layer.self_attn.compressor.gate_bias.copy_(bias[:, None])
    return model


def _penalty(model: PhaseKVModel, ids: torch.Tensor) -> torch.Tensor:
    with capture_gates(model) as gates:
        model(ids)
    assert len(gates) == 2 * len(model.layers)  # key and value branches
    return static_concentration(gates)


def test_static_concentration_is_log_w_for_a_fixed_gate_and_zero_for_uniform():
    ids = torch.randint(0, 50, (2, 40))
    fixed = torch.full((8,), -30.0)
    fixed[5] = 30.0
    assert _penalty(_gated_model(fixed), ids).item() == pytest.approx(math.log(8), abs=1e-4)
    assert _penalty(_gated_model(torch.zeros(8)), ids).item() == pytest.approx(0.0, abs=1e-6)
    uniform = PhaseKVModel(small_config("w8s8-1kv-uniform").model_config(50))
    assert _penalty(uniform, ids).item() == pytest.approx(0.0, abs=1e-6)
    # concentrated in every window but on a different offset each time: statically uniform
    cycling = torch.eye(8)[None, :, :, None, None].expand(3, 8, 8, 2, 4)  # [B, n, W, kv, g]
    w8s8 = WindowGeometry(8, 8)
    assert static_concentration([GateCapture(cycling, w8s8)]).item() == pytest.approx(0.0, abs=1e-6)
    assert static_concentration([GateCapture(cycling[:, :1], w8s8)]).item() == pytest.approx(math.log(8), abs=1e-6)


def test_record_windows_and_the_penalty_over_them():
    keys = torch.zeros(2, 40, dtype=torch.bool)
    keys[0, 3], keys[0, 20], keys[1, 39] = True, True, True
    assert record_windows(keys, WindowGeometry(8, 8), 5).tolist() == [
        [True, False, True, False, False],
        [False, False, False, False, True],
    ]
    # W16/S8: windows 8j..8j+15; position 20 lies in windows 1 and 2, position 39 in window 3 only
    assert record_windows(keys, WindowGeometry(16, 8), 4).tolist() == [
        [True, True, True, False],
        [False, False, False, True],
    ]
    # every window on a different offset: uniform on average over all windows, one offset over the keyed ones
    cycling = torch.eye(8)[None, :5, :, None, None].expand(2, 5, 8, 1, 1)  # [B, n=5, W, kv, g]
    captured = [GateCapture(cycling, WindowGeometry(8, 8))]
    only_first = torch.zeros(2, 40, dtype=torch.bool)
    only_first[:, 2] = True  # window 0 holds the only key
    assert static_concentration(captured, only_first).item() == pytest.approx(math.log(8), abs=1e-6)
    assert static_concentration(captured, torch.zeros(2, 40, dtype=torch.bool)).item() == 0.0  # no keyed window
    assert static_concentration(captured).item() == pytest.approx(math.log(8) - math.log(5), abs=1e-6)


def test_static_concentration_changes_the_gradient_towards_spread_gates():
    torch.manual_seed(0)
    model = _gated_model(torch.linspace(2.0, -2.0, 8))  # gates lean towards offset 0
    ids = torch.randint(0, 50, (2, 40))
    bias = model.layers[0].self_attn.compressor.gate_bias
    penalty = _penalty(model, ids)
    assert penalty.requires_grad  # captured with the graph
    (grad,) = torch.autograd.grad(penalty, bias)
    assert grad[0].sum() > 0 and grad[-1].sum() < 0  # descent lowers the favoured offset, raises the neglected one


def test_random_window_offset_is_a_function_of_seed_and_step():
    draws = [step_offset(7, step, 8) for step in range(400)]
    assert draws == [step_offset(7, step, 8) for step in range(400)]
    assert draws != [step_offset(8, step, 8) for step in range(400)]
    assert set(draws) == set(range(8)) and max(np.bincount(draws)) < 80  # about 50 each
    assert all(step_offset(3, step, 1) == 0 for step in range(5))


def test_training_options_reach_the_step_and_the_log(tmp_path, monkeypatch):
    seen = []
    original = PhaseKVModel.window_offset

    def spy(self, offset):
        seen.append(offset)
        return original(self, offset)

    monkeypatch.setattr(PhaseKVModel, "window_offset", spy)
    config = small_config(steps=4, random_window_offset=True, static_concentration_weight=1.0, val_every=2)
    train(config, tmp_path / "on", progress=False)
    assert seen == [step_offset(config.seed, step, 8) for step in range(4)]  # validation used the configured one
    log = read_log(tmp_path / "on")
    gaps = [r["static_concentration"] for r in log if "loss" in r]
    assert len(gaps) == 4 and all(0 <= g <= math.log(8) for g in gaps)
    train(small_config(steps=4, val_every=2), tmp_path / "off", progress=False)
    assert all("static_concentration" not in r for r in read_log(tmp_path / "off"))
    assert losses(tmp_path / "on")[1:] != losses(tmp_path / "off")[1:]
    records = small_config(steps=4, static_concentration_weight=1.0, concentration_windows="records", val_every=2)
    train(records, tmp_path / "records", progress=False)
    record_gaps = [r["static_concentration"] for r in read_log(tmp_path / "records") if "loss" in r]
    assert len(record_gaps) == 4 and all(0 <= g <= math.log(8) for g in record_gaps)
    assert losses(tmp_path / "records")[1:] != losses(tmp_path / "on")[1:]  # other windows, another gradient


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(static_concentration_weight=-1.0), "static_concentration_weight must be a finite number >= 0"),
        (dict(static_concentration_weight=float("nan")), "static_concentration_weight must be a finite number"),
        (dict(random_window_offset="yes"), "random_window_offset must be true or false"),
        (dict(static_concentration_weight=1.0, concentration_windows="keys"), "unknown concentration_windows"),
        (dict(concentration_windows="records"), "concentration_windows needs static_concentration_weight > 0"),
        (dict(indexer_warmup_steps=-1), "indexer_warmup_steps must be >= 0"),
    ],
)
def test_bad_training_options_fail_with_a_clear_message(changes, message):
    with pytest.raises(RunConfigError, match=message):
        small_config(**changes)


def test_training_options_need_a_compressed_model(tmp_path):
    config = small_config("full-1kv", steps=1, random_window_offset=True, static_concentration_weight=0.1)
    with pytest.raises(RunConfigError, match="random_window_offset and static_concentration_weight need a compressed"):
        train(config, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


def test_indexer_warmup_reads_every_entry_for_its_first_steps_only(tmp_path, monkeypatch):
    entered = []
    original = PhaseKVModel.dense_indexer

    def spy(self):
        entered.append(self.training)
        return original(self)

    monkeypatch.setattr(PhaseKVModel, "dense_indexer", spy)
    train(small_config("dsv4-csa", steps=4, indexer_warmup_steps=2, val_every=2), tmp_path / "warm", progress=False)
    assert entered == [True, True]  # steps 0 and 1, in training; validation read top-k
    with pytest.raises(RunConfigError, match="indexer_warmup_steps needs a DeepSeek-V4 model with CSA layers"):
        train(small_config("w8s8-1kv", steps=1, indexer_warmup_steps=1), tmp_path / "plain", progress=False)
    assert not (tmp_path / "plain").exists()


def test_train_command_defaults_are_the_run_config_defaults_and_every_option_reaches_the_config():
    """`phasekv train` builds its RunConfig from every parameter except the command's own; its defaults are the
    config's, and options such as --text-fraction (mixed data) and --lr land where they belong."""
    import typer

    from phasekv.cli import app
    from phasekv.cli.train import RUN_OPTIONS, run_config_from_options

    command = typer.main.get_command(app).commands["train"]

    def config(*args: str) -> RunConfig:
        params = command.make_context("train", ["--out", "x", *args]).params
        return run_config_from_options({name: params[name] for name in RUN_OPTIONS})

    assert config() == RunConfig()
    run = config(
        "--data", "mixed", "--tokens-dir", "t", "--text-fraction", "0.25", "--lr", "0.01", "--gate-steps", "0,5"
    )
    assert (run.data.kind, run.data.text_fraction, run.optim.lr, run.gate_steps) == ("mixed", 0.25, 0.01, (0, 5))
