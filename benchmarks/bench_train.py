"""Training throughput of the tiny presets: tokens/s compressed / full attention, measured in one run.

One training step = forward + cross-entropy + backward + AdamW step on a random token batch of
`--batch-tokens` tokens (batch = batch_tokens / T sequences of T tokens; the same tokens for every
preset at a given T). Warm-up steps, then the median of `--reps` timed steps per (preset, T).
Targets from issue 7: tokens/s ratio >= 0.8 at T = 512 and >= 1.5 at T = 2048.

    .venv/bin/python benchmarks/bench_train.py --lengths 512,2048 --threads 1 --out train.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from phasekv.model import PhaseKVModel, preset_config

TARGETS = {512: 0.8, 2048: 1.5}


def step_seconds(preset: str, length: int, batch_tokens: int, reps: int, warmup: int, seed: int) -> float:
    torch.manual_seed(seed)
    model = PhaseKVModel(preset_config(preset, "tiny")).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    batch = max(1, batch_tokens // length)
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (batch, length + 1), generator=gen)
    inputs, targets = ids[:, :-1], ids[:, 1:]
    times = []
    for i in range(warmup + reps):
        start = time.perf_counter()
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


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
    parser.add_argument("--out", default=None, help="write the table as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"train step (fwd+bwd+AdamW), tiny presets, float32, {args.batch_tokens} tokens/step, "
        f"{args.threads} threads, median of {args.reps} after {args.warmup} warm-up"
    )
    print(f"{'T':>5} {'preset':>10} {'batch':>5} {'step s':>7} {'tokens/s':>9} {'ratio':>6} {'target':>7} {'met':>4}")
    rows = []
    for length in (int(v) for v in args.lengths.split(",")):
        batch = max(1, args.batch_tokens // length)
        base_s = step_seconds(args.baseline, length, args.batch_tokens, args.reps, args.warmup, args.seed)
        for preset in [args.baseline, *args.presets.split(",")]:
            if preset == args.baseline:
                sec = base_s
            else:
                sec = step_seconds(preset, length, args.batch_tokens, args.reps, args.warmup, args.seed)
            ratio = base_s / sec  # tokens/s compressed / full
            target = TARGETS.get(length) if preset != args.baseline else None
            row = dict(
                T=length, preset=preset, batch=batch, step_s=sec, tokens_per_s=batch * length / sec, ratio=ratio,
                target=target, met=None if target is None else ratio >= target,
            )  # fmt: skip
            rows.append(row)
            met = "-" if target is None else ("yes" if row["met"] else "no")
            print(
                f"{length:>5} {preset:>10} {batch:>5} {sec:>7.3f} {row['tokens_per_s']:>9.0f} {ratio:>6.2f} "
                f"{'-' if target is None else f'>={target}':>7} {met:>4}"
            )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(vars(args), rows=rows), f, indent=2)


if __name__ == "__main__":
    main()
