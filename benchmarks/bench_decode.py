"""Decoding with the compressed KV cache vs full attention at a long context, measured in one run.

For each preset (tiny size, float32, batch 1): prefill a random prompt of `--context` tokens in chunks
of `--chunk` through `phasekv.cache.generate.prefill`, then feed `--steps` generated tokens one at a
time (greedy) and time each step. Prints the median time per token, the prefill time and the cache
size (`KVCache.nbytes()`), and the ratios compressed / full (targets: time per token
<= 0.3, cache bytes close to 1/S).

    .venv/bin/python benchmarks/bench_decode.py --context 32768 --steps 32 --threads 2 --out decode.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from phasekv.cache import KVCache
from phasekv.cache.generate import prefill
from phasekv.model import PhaseKVModel, preset_config


def measure(preset: str, context: int, chunk: int, steps: int, seed: int) -> dict:
    torch.manual_seed(seed)
    model = PhaseKVModel(preset_config(preset, "tiny")).eval()
    ids = torch.randint(0, model.config.vocab_size, (1, context), generator=torch.Generator().manual_seed(seed))
    cache = KVCache.for_model(model)
    with torch.inference_mode():
        start = time.perf_counter()
        logits = prefill(model, ids, cache, chunk)
        prefill_s = time.perf_counter() - start
        nbytes = cache.nbytes()
        token = logits[:, -1:].argmax(-1)
        times = []
        for step in range(steps + 2):  # the first two steps warm up
            start = time.perf_counter()
            logits = model(token, cache)
            elapsed = time.perf_counter() - start
            token = logits[:, -1:].argmax(-1)
            if step >= 2:
                times.append(elapsed)
    comp = model.config.compression
    return dict(
        preset=preset,
        stride=None if comp is None else comp.stride,
        prefill_s=prefill_s,
        token_s=statistics.median(times),
        token_s_all=times,
        cache_bytes=nbytes,
        entries=cache.num_entries(),
    )


def ideal_full_token_s(preset: str, context: int, steps: int, seed: int) -> float:
    """An estimate of the best full-attention decoding step: the full model's step at a 16-token context
    (everything but attention over the long cache) plus, per layer, SDPA of one query over `context`
    keys held in a preallocated buffer (no cache concatenation, no GQA key copy: `enable_gqa`)."""
    torch.manual_seed(seed)
    model = PhaseKVModel(preset_config(preset, "tiny")).eval()
    cfg = model.config
    cache = KVCache.for_model(model)
    token = torch.zeros(1, 1, dtype=torch.long)
    q = torch.randn(1, cfg.num_heads, 1, cfg.head_dim)
    k = torch.randn(1, cfg.num_kv_heads, context, cfg.head_dim)
    v = torch.randn(1, cfg.num_kv_heads, context, cfg.head_dim)
    rest, attn = [], []
    with torch.inference_mode():
        prefill(model, torch.zeros(1, 16, dtype=torch.long), cache)
        for step in range(steps + 2):
            start = time.perf_counter()
            model(token, cache.fork())
            mid = time.perf_counter()
            for _ in range(cfg.num_layers):
                F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            end = time.perf_counter()
            if step >= 2:
                rest.append(mid - start)
                attn.append(end - mid)
    return statistics.median(rest) + statistics.median(attn)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--context", type=int, default=32768)
    parser.add_argument("--chunk", type=int, default=2048, help="prefill chunk size")
    parser.add_argument("--steps", type=int, default=32, help="timed decoding steps (after 2 warm-up steps)")
    parser.add_argument("--presets", default="w8s8-1kv,w8s4-1kv,dsv4")
    parser.add_argument("--baseline", default="full-1kv")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: see README, shared machine)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="write the table as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"decode after a {args.context}-token prefill (chunks of {args.chunk}), tiny presets, float32, batch 1, "
        f"{args.threads} threads, median of {args.steps} steps"
    )
    base = measure(args.baseline, args.context, args.chunk, args.steps, args.seed)
    rows = [base]
    for preset in args.presets.split(","):
        rows.append(measure(preset, args.context, args.chunk, args.steps, args.seed))
    ideal = ideal_full_token_s(args.baseline, args.context, args.steps, args.seed)
    print(
        f"{'preset':>10} {'prefill s':>9} {'ms/token':>8} {'cache MiB':>9} {'time ratio':>10} {'bytes ratio':>11} "
        f"{'1/S':>5} {'vs ideal full':>13}"
    )
    for row in rows:
        row["time_ratio"] = row["token_s"] / base["token_s"]
        row["bytes_ratio"] = row["cache_bytes"] / base["cache_bytes"]
        row["time_ratio_vs_ideal_full"] = row["token_s"] / ideal
        inv = "-" if row["stride"] is None else f"{1 / row['stride']:.3f}"
        print(
            f"{row['preset']:>10} {row['prefill_s']:>9.2f} {1e3 * row['token_s']:>8.2f} "
            f"{row['cache_bytes'] / 2**20:>9.2f} {row['time_ratio']:>10.2f} {row['bytes_ratio']:>11.3f} {inv:>5} "
            f"{row['time_ratio_vs_ideal_full']:>13.2f}"
        )
    print(
        f"ideal full step (estimate: {args.baseline} at a 16-token context + SDPA over a preallocated "
        f"{args.context}-key cache per layer): {1e3 * ideal:.2f} ms/token"
    )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(vars(args), ideal_full_token_s=ideal, rows=rows), f, indent=2)


if __name__ == "__main__":
    main()
