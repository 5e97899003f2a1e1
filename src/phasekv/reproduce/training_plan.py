"""A profile's training plan: its runs, their run configs on disk, and the torchrun command lines that launch them."""

from __future__ import annotations

from pathlib import Path

from ..train.config import save_run_config
from .profiles import Profile
from .runner import final_checkpoint, reuse_source


def torchrun_command(config: Path, run_dir: Path, nproc: int = 8, nodes: int = 1) -> str:
    launcher = f"torchrun --nnodes {nodes} --nproc_per_node {nproc}"
    if nodes > 1:
        launcher += " --rdzv_backend c10d --rdzv_endpoint $MASTER_ADDR:29500"
    return f"{launcher} -m phasekv.train --config {config} --out {run_dir} --resume"


def data_line(profile: Profile) -> str:
    if not profile.text_fraction:
        return "data: the synthetic retrieval mixture alone"
    return (
        f"data: {profile.text_fraction:.0%} of every batch real text from {profile.tokens_dir} "
        f"(make it with `phasekv data tokenize FILES --tokenizer DIR --out {profile.tokens_dir}`), "
        f"{1 - profile.text_fraction:.0%} the retrieval mixture"
    )


def budget_line(profile: Profile) -> str:
    tokens = [profile.tokens_per_run(run) for run in profile.runs]
    low, high = min(tokens) / 1e9, max(tokens) / 1e9
    each = f"{low:.3g}B" if low == high else f"{low:.3g}-{high:.3g}B"
    line = f"budget: {each} tokens per run, {sum(tokens) / 1e9:.4g}B in all"
    return line + (f" ({profile.budget_note})" if profile.budget_note else "")


# Training tokens/s of one thread at tiny size, batch 16 x 192, measured in the quick reproduction on a
# quiet 2-core machine; presets not measured take the slowest (W8/S4). Overhead (start-up, validation,
# checkpoints) 5%: with it the quick profile's estimate is 944 s, its measured training 947 s.
TINY_TOKENS_PER_S = {"full-1kv": 13_563, "w8s8-1kv": 13_400, "w8s4-1kv": 11_200, "w8s8-1kv-uniform": 12_711}
OVERHEAD = 1.05


def estimated_seconds(profile: Profile, skip: set[str] = frozenset()) -> float | None:
    """Wall seconds to train every run of a tiny-size profile (but the runs named in `skip`) with
    `profile.jobs` one-thread processes, longest first (as `train_all` schedules them); None for other sizes."""
    if profile.size != "tiny":
        return None
    slowest = min(TINY_TOKENS_PER_S.values())
    seconds = sorted(
        (
            OVERHEAD * profile.tokens_per_run(run) / TINY_TOKENS_PER_S.get(run.preset, slowest)
            for run in profile.runs
            if run.name not in skip
        ),
        reverse=True,
    )
    workers = [0.0] * max(1, profile.jobs)
    for s in seconds:
        workers[workers.index(min(workers))] += s
    return max(workers)


def write_plan(profile: Profile, out: str | Path) -> str:
    """Write every run's config to out/runs/<run>.json and describe the plan with its launch commands."""
    out = Path(out)
    lines = [
        f"profile {profile.name}: {profile.description}",
        f"size {profile.size}, batch {profile.batch_size} x {profile.seq_len} tokens, data seed {profile.data_seed}",
        data_line(profile),
        budget_line(profile),
    ]
    # runs finished in `out`, or finished identically in a sibling directory the profile reuses, cost nothing
    ready = {run.name: "finished" for run in profile.runs if final_checkpoint(out, run) is not None}
    for run in profile.runs:
        source = None if run.name in ready else reuse_source(profile, out, run)
        if source is not None:
            ready[run.name] = f"reused from {source}"
    estimate = estimated_seconds(profile, set(ready))
    if estimate is not None:
        left = f"; {len(ready)} of {len(profile.runs)} runs finished or reused" if ready else ""
        lines.append(
            f"estimated training time on a quiet 2-core CPU ({profile.jobs} one-thread processes): "
            f"{estimate / 3600:.1f} h, plus evaluation (about 3 s per model){left}"
        )
    lines.append("")
    commands = []
    for run in profile.runs:
        run_dir = out / "runs" / run.name
        config = save_run_config(profile.run_config(run), out / "configs" / run.name)
        tokens = profile.tokens_per_run(run)
        status = f"  ({ready[run.name]})" if run.name in ready else ""
        lines.append(
            f"{run.name:<22} {run.label:<36} seed {run.seed:<3} {run.steps:>7} steps {tokens / 1e9:>9.3f}B tokens"
            f"{status}"
        )
        commands.append(torchrun_command(config, run_dir))
    lines += ["", "launch commands (one node of 8 GPUs each; `--nnodes N` with a rendezvous for more):", *commands]
    lines += [
        "",
        f"then `phasekv reproduce --profile {profile.name} --out {out}` evaluates the finished runs "
        "and writes the table and figure.",
    ]
    return "\n".join(lines)
