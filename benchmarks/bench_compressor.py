"""The compressor alone (entries from hidden states) vs one ordinary K projection, measured in one run.

Input: hidden states [1, T, d_model] (T = 16K by default, d_model 512, 1 KV head, head dim 64,
float32). Baseline: `nn.Linear(d_model, head_dim)`, the layer's own K projection. For each compressor
kind, the median time of the forward pass and of forward + backward (gradients to the input and the
parameters) is divided by the baseline's. The multiply-add ratio (payload maps and gates of every
window slot / d_model x head_dim per token) is printed beside it: it is what a single fused matmul
per slot would cost, so a ratio near it shows the per-offset maps are not done in a slow loop.

    .venv/bin/python benchmarks/bench_compressor.py --length 16384 --threads 1 --out compressor.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch import nn

from phasekv.compress import PaperCompression, build_compressor, paper
from phasekv.config import CompressionConfig
from phasekv.model.presets import DSV4_STYLE

D_MODEL, KV_HEADS, HEAD_DIM = 512, 1, 64
KINDS = {
    "w8s8": PaperCompression(8, 8),
    "w8s4": PaperCompression(8, 4),
    "w8s8-vector": PaperCompression(8, 8, gate="vector"),
    "dsv4": DSV4_STYLE,
}


def madd_ratio(cfg: CompressionConfig) -> float:
    """Multiply-adds per token of the compressor's matmuls / those of the K projection."""
    branches = 1 if cfg.shared_kv else 2
    if cfg.kind == "dsv4":  # kv_proj and gate_proj, each d -> 2 x head_dim, once per token
        return 2 * 2 * KV_HEADS * HEAD_DIM / HEAD_DIM
    gate = 0 if cfg.gate == "uniform" else (HEAD_DIM if cfg.gate == "vector" else 1)
    return cfg.window / cfg.stride * branches * KV_HEADS * (HEAD_DIM + gate) / HEAD_DIM


def timed(fn, reps: int, warmup: int) -> float:
    times = []
    for i in range(warmup + reps):
        start = time.perf_counter()
        fn()
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(module: nn.Module, forward, length: int, reps: int, warmup: int) -> tuple[float, float]:
    x = torch.randn(1, length, D_MODEL, requires_grad=True)

    def fwd():
        with torch.no_grad():
            forward(module, x)

    def fwd_bwd():
        out = forward(module, x)
        sum(t.sum() for t in out).backward()

    return timed(fwd, reps, warmup), timed(fwd_bwd, reps, warmup)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=16384)
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: see README, shared machine)")
    parser.add_argument(
        "--pooling", default=paper.POOLING, choices=["fused", "plain"], help="paper compressor's fwd+bwd path"
    )
    parser.add_argument("--out", default=None, help="write the table as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    paper.POOLING = args.pooling
    torch.manual_seed(0)
    k_proj = nn.Linear(D_MODEL, KV_HEADS * HEAD_DIM, bias=False)
    base_f, base_fb = measure(k_proj, lambda m, x: (m(x),), args.length, args.reps, args.warmup)
    print(
        f"compressor alone, T = {args.length}, d_model {D_MODEL}, {KV_HEADS} KV head x {HEAD_DIM}, float32, "
        f"{args.threads} threads, median of {args.reps}, {args.pooling} pooling; "
        f"baseline nn.Linear({D_MODEL}, {HEAD_DIM}): "
        f"fwd {1e3 * base_f:.2f} ms, fwd+bwd {1e3 * base_fb:.2f} ms"
    )
    print(f"{'kind':>12} {'fwd ms':>8} {'fwd ratio':>9} {'f+b ms':>8} {'f+b ratio':>9} {'madd ratio':>10}")
    rows = []
    for kind in args.kinds.split(","):
        cfg = KINDS[kind]
        torch.manual_seed(0)
        comp = build_compressor(D_MODEL, KV_HEADS, HEAD_DIM, cfg)
        comp.reset_parameters(0.02)
        f, fb = measure(comp, lambda m, x: (lambda e: (e.key, e.value))(m(x)), args.length, args.reps, args.warmup)
        row = dict(
            kind=kind,
            fwd_s=f,
            fwd_ratio=f / base_f,
            fwd_bwd_s=fb,
            fwd_bwd_ratio=fb / base_fb,
            madd_ratio=madd_ratio(cfg),
        )
        rows.append(row)
        print(
            f"{kind:>12} {1e3 * f:>8.2f} {row['fwd_ratio']:>9.2f} {1e3 * fb:>8.2f} {row['fwd_bwd_ratio']:>9.2f} "
            f"{row['madd_ratio']:>10.2f}"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(vars(args), k_proj_fwd_s=base_f, k_proj_fwd_bwd_s=base_fb, rows=rows), f, indent=2)


if __name__ == "__main__":
    main()
