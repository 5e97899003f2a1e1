"""Training throughput of the tiny presets: tokens/s compressed / full attention, measured in one run.

One training step = forward + cross-entropy + backward + AdamW step on a random token batch of
`--batch-tokens` tokens (batch = batch_tokens / T sequences of T tokens; the same tokens for every
preset at a given T). Warm-up steps, then the median of `--reps` timed steps per (preset, T).
Targets: tokens/s ratio >= 0.8 at T = 512 and >= 1.5 at T = 2048.

    .venv/bin/python benchmarks/bench_train.py --lengths 512,2048 --threads 1 --out train.json

On CUDA (`--device cuda --size paper --dtype bfloat16`: bf16 autocast over float32 weights, as the
trainer does) it also prints MFU: model FLOPs per step / step time / `--peak-tflops` (default: H100/H200
dense bf16). Model FLOPs = 6 x the matmul weights each token passes (every nn.Linear, the tied lm_head,
the paper compressor's per-slot maps once per S tokens) x tokens, plus 12 x layers x heads x head_dim x
the keys each query sees (causal: t + 1; compressed: visible entries + local window), i.e. the work the
model must do, the same count for both.

    python benchmarks/bench_train.py --device cuda --size paper --dtype bfloat16 --lengths 8192 \
        --batch-tokens 16384 --presets w8s8-1kv --warmup 5 --reps 200
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from phasekv.attention import dispatch
from phasekv.compress import PaperCompressor
from phasekv.config import ModelConfig
from phasekv.model import PhaseKVModel, preset_config

TARGETS = {512: 0.8, 2048: 1.5}


def step_seconds(preset: str, length: int, args) -> tuple[float, float]:
    """(median step seconds, model FLOPs per step) of preset at T = length."""
    torch.manual_seed(args.seed)
    model = PhaseKVModel(preset_config(preset, args.size)).to(args.device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    batch = max(1, args.batch_tokens // length)
    gen = torch.Generator().manual_seed(args.seed)
    ids = torch.randint(0, model.config.vocab_size, (batch, length + 1), generator=gen).to(args.device)
    inputs, targets = ids[:, :-1], ids[:, 1:]
    cuda = args.device.startswith("cuda")
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda and args.dtype == "bfloat16" else None
    times = []
    for i in range(args.warmup + args.reps):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        with autocast or contextlib.nullcontext():
            logits = model(inputs)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times), batch * model_flops_per_sequence(model, length)


def model_flops_per_sequence(model: PhaseKVModel, length: int) -> float:
    """Training FLOPs (forward + backward) of one sequence of `length` tokens (see the module's docstring)."""
    per_token = 0.0
    for module in model.modules():
        if isinstance(module, nn.Linear):
            per_token += module.weight.numel()
        elif isinstance(module, PaperCompressor):
            maps = module.payload.numel() + (module.gate_weight.numel() if module.cfg.gate != "uniform" else 0)
            per_token += maps / module.cfg.stride  # each window's W slots, one window per S tokens
    return 6 * per_token * length + 12 * attention_keys(model.config, length) * _attention_width(model.config)


def attention_keys(cfg: ModelConfig, length: int) -> float:
    """Keys the queries of one sequence see, summed over queries (causal, or entries + local window)."""
    t = torch.arange(length, dtype=torch.float64)
    comp = cfg.compression
    if comp is None:
        return float((t + 1).sum())
    entries = torch.clamp(torch.div(t - comp.window + 1, comp.stride, rounding_mode="floor") + 1, min=0)
    return float((entries + torch.clamp(t + 1, max=comp.local_window)).sum())


def _attention_width(cfg: ModelConfig) -> int:
    return cfg.num_layers * cfg.num_heads * cfg.head_dim


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="512,2048")
    parser.add_argument("--presets", default="w8s8-1kv,w8s4-1kv,dsv4")
    parser.add_argument("--baseline", default="full-1kv")
    parser.add_argument("--batch-tokens", type=int, default=4096, help="tokens per step (batch x T)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: see README, shared machine)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--size", default="tiny", choices=["tiny", "paper"], help="preset size")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="bfloat16: CUDA autocast")
    parser.add_argument("--flex", action="store_true", help="compressed layers on flex_attention (CUDA only)")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="MFU's denominator (H100/H200 bf16 dense)")
    parser.add_argument("--out", default=None, help="write the table as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dispatch.USE_ON_CUDA = args.flex
    print(
        f"train step (fwd+bwd+AdamW), {args.size} presets, {args.dtype} on {args.device}, {args.batch_tokens} "
        f"tokens/step, {args.threads} threads, median of {args.reps} after {args.warmup} warm-up"
        + (", flex" if args.flex else "")
    )
    print(
        f"{'T':>5} {'preset':>10} {'batch':>5} {'step s':>7} {'tokens/s':>9} {'ratio':>6} {'target':>7} {'met':>4} "
        f"{'MFU':>6}"
    )
    targets = TARGETS if args.size == "tiny" else {}
    cuda = args.device.startswith("cuda")  # MFU against a GPU's peak only
    rows = []
    for length in (int(v) for v in args.lengths.split(",")):
        batch = max(1, args.batch_tokens // length)
        base_s = None
        for preset in [args.baseline, *args.presets.split(",")]:  # the baseline first
            sec, flops = step_seconds(preset, length, args)
            base_s = base_s or sec
            ratio = base_s / sec  # tokens/s compressed / full
            target = targets.get(length) if preset != args.baseline else None
            row = dict(
                T=length, preset=preset, batch=batch, step_s=sec, tokens_per_s=batch * length / sec, ratio=ratio,
                target=target, met=None if target is None else ratio >= target,
                model_tflops_per_step=flops / 1e12, mfu=flops / sec / (args.peak_tflops * 1e12) if cuda else None,
            )  # fmt: skip
            rows.append(row)
            met = "-" if target is None else ("yes" if row["met"] else "no")
            mfu = "-" if row["mfu"] is None else f"{row['mfu']:.3f}"
            print(
                f"{length:>5} {preset:>10} {batch:>5} {sec:>7.3f} {row['tokens_per_s']:>9.0f} {ratio:>6.2f} "
                f"{'-' if target is None else f'>={target}':>7} {met:>4} {mfu:>6}",
                flush=True,
            )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(vars(args), rows=rows), f, indent=2)


if __name__ == "__main__":
    main()
