"""A profile's plan: its runs, their run configs on disk, and the torchrun command lines that launch them."""

from __future__ import annotations

from pathlib import Path

from ..train.config import save_run_config
from .profiles import Profile


def torchrun_command(config: Path, run_dir: Path, nproc: int = 8, nodes: int = 1) -> str:
    launcher = f"torchrun --nnodes {nodes} --nproc_per_node {nproc}"
    if nodes > 1:
        launcher += " --rdzv_backend c10d --rdzv_endpoint $MASTER_ADDR:29500"
    return f"{launcher} -m phasekv.train --config {config} --out {run_dir} --resume"


def write_plan(profile: Profile, out: str | Path) -> str:
    """Write every run's config to out/runs/<run>.json and describe the plan with its launch commands."""
    out = Path(out)
    lines = [
        f"profile {profile.name}: {profile.description}",
        f"size {profile.size}, batch {profile.batch_size} x {profile.seq_len} tokens, data seed {profile.data_seed}",
        "",
    ]
    commands = []
    for run in profile.runs:
        run_dir = out / "runs" / run.name
        config = save_run_config(profile.run_config(run), out / "configs" / run.name)
        lines.append(f"{run.name:<22} {run.label:<36} seed {run.seed:<3} {run.steps:>7} steps")
        commands.append(torchrun_command(config, run_dir))
    lines += ["", "launch commands (one node of 8 GPUs each; `--nnodes N` with a rendezvous for more):", *commands]
    lines += [
        "",
        f"then `phasekv reproduce --profile {profile.name} --out {out}` evaluates the finished runs "
        "and writes the table and figure.",
    ]
    return "\n".join(lines)
