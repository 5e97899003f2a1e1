"""Attention layer forward+backward: compressed vs full attention (PyTorch SDPA), measured in one run.

For each sequence length T, builds the layer of the issue's shape (d_model 512, 8 query heads of dim
64, 1 KV head, local window 16, float32, batch 1) with full attention and with each compressed kind,
runs warm-up + `reps` timed forward+backward passes on the same threads, and prints the median
time ratio compressed / full beside the ratio of visible FLOPs (projections + compressor + the
attention work each query can see: the lower bound of the ratio). Peak memory is measured in a
fresh subprocess per (kind, T) as the growth of the resident set: peak RSS during one forward+backward
(the kernel's peak mark is reset first, where Linux allows; a 256-token pass before it loads code pages
and thread pools) minus the RSS before it.

    .venv/bin/python benchmarks/bench_attention.py --lengths 1024,4096,8192,16384 --threads 2 --out bench.json
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import statistics
import time

import torch

from phasekv.attention import Attention, compressed
from phasekv.compress import paper
from phasekv.config import CompressionConfig, ModelConfig
from phasekv.model.presets import DSV4_STYLE

D_MODEL, HEADS, HEAD_DIM, KV_HEADS, LOCAL = 512, 8, 64, 1, 16
KINDS = {
    "full": None,
    "w8s8": CompressionConfig(8, 8, local_window=LOCAL),
    "w8s4": CompressionConfig(8, 4, local_window=LOCAL),
    "dsv4": DSV4_STYLE,
}


def build(kind: str) -> Attention:
    torch.manual_seed(0)
    extra = dict(rope_dim=HEAD_DIM // 2, rope_style="interleaved") if kind == "dsv4" else {}
    cfg = ModelConfig(
        hidden_size=D_MODEL, num_heads=HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM, compression=KINDS[kind], **extra
    )
    return Attention(cfg)


def visible_flops(kind: str, length: int) -> float:
    """Multiply-adds x 2 of the forward pass: projections, compressor and visible attention."""
    proj = length * D_MODEL * (HEADS + 2 * KV_HEADS) * HEAD_DIM + length * HEADS * HEAD_DIM * D_MODEL
    comp = KINDS[kind]
    if comp is None:
        keys = length * (length + 1) / 2
        compressor = 0
    else:
        t = torch.arange(length, dtype=torch.float64)
        entries = torch.clamp(torch.div(t - comp.window + 1, comp.stride, rounding_mode="floor") + 1, min=0)
        keys = float((entries + torch.clamp(t + 1, max=comp.local_window)).sum())
        branches = 1 if comp.shared_kv else 2
        per_token = comp.window / comp.stride if comp.kind == "paper" else 1  # dsv4 projects each token once
        compressor = length * per_token * D_MODEL * branches * KV_HEADS * HEAD_DIM
    return 2 * (proj + compressor + keys * HEADS * HEAD_DIM * 2)


def time_fwd_bwd(layer: Attention, length: int, reps: int) -> float:
    x = torch.randn(1, length, D_MODEL, requires_grad=True)
    times = []
    for i in range(reps + 1):  # the first pass warms up
        start = time.perf_counter()
        layer(x).sum().backward()
        if i:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def _peak_worker(kind: str, length: int, threads: int, queue, implementation: str, pooling: str) -> None:
    torch.set_num_threads(threads)
    compressed.IMPLEMENTATION = implementation
    paper.POOLING = pooling
    layer = build(kind)
    # a short pass first: the code pages and thread pools it loads are not the layer's memory
    layer(torch.randn(1, 256, D_MODEL, requires_grad=True)).sum().backward()
    x = torch.randn(1, length, D_MODEL, requires_grad=True)
    reset = _reset_peak_rss()
    before = _status_kib("VmRSS") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    layer(x).sum().backward()
    after = _status_kib("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    queue.put((after - before) / 1024)  # MiB


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (Linux: clear_refs 5), so the peak that follows is this pass's
    and not an earlier one's (e.g. of the imports); False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def peak_mib(kind: str, length: int, threads: int, implementation: str = "flash", pooling: str = "fused") -> float:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_peak_worker, args=(kind, length, threads, queue, implementation, pooling))
    proc.start()
    value = queue.get()
    proc.join()
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default="1024,4096,8192,16384")
    parser.add_argument("--kinds", default="w8s8,w8s4,dsv4")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    parser.add_argument(
        "--implementation",
        default=compressed.IMPLEMENTATION,
        choices=["flash", "blocked"],
        help="compressed attention: flash (O(T)-memory autograd function, the default) or blocked (autograd)",
    )
    parser.add_argument(
        "--pooling",
        default=paper.POOLING,
        choices=["fused", "plain"],
        help="paper compressor: fused (no window copy, the default) or plain (autograd over a window copy)",
    )
    parser.add_argument("--out", default=None, help="write the table as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    compressed.IMPLEMENTATION = args.implementation
    paper.POOLING = args.pooling
    kinds = args.kinds.split(",")
    rows = []
    print(
        f"fwd+bwd, float32, d_model {D_MODEL}, {HEADS} heads x {HEAD_DIM}, {KV_HEADS} KV head, L={LOCAL}, "
        f"{args.threads} threads, median of {args.reps}, {args.implementation} compressed attention, "
        f"{args.pooling} pooling"
    )
    print(f"{'T':>6} {'kind':>5} {'full s':>8} {'comp s':>8} {'ratio':>6} {'FLOP ratio':>10} {'mem ratio':>9}")
    for length in (int(v) for v in args.lengths.split(",")):
        full_s = time_fwd_bwd(build("full"), length, args.reps)
        full_mem = None if args.no_memory else peak_mib("full", length, args.threads)
        for kind in kinds:
            comp_s = time_fwd_bwd(build(kind), length, args.reps)
            comp_mem = None
            if not args.no_memory:
                comp_mem = peak_mib(kind, length, args.threads, args.implementation, args.pooling)
            # growth of the resident set; too small to compare below 16 MiB
            mem = comp_mem / full_mem if comp_mem is not None and full_mem >= 16 else None
            row = dict(
                T=length,
                kind=kind,
                full_s=full_s,
                compressed_s=comp_s,
                ratio=comp_s / full_s,
                flop_ratio=visible_flops(kind, length) / visible_flops("full", length),
                memory_ratio=mem,
            )
            rows.append(row)
            mem_text = "-" if mem is None else f"{mem:.2f}"
            print(
                f"{length:>6} {kind:>5} {full_s:>8.3f} {comp_s:>8.3f} {row['ratio']:>6.2f} "
                f"{row['flop_ratio']:>10.2f} {mem_text:>9}"
            )
    if args.out:
        with open(args.out, "w") as f:
            meta = {"threads": args.threads, "reps": args.reps, "implementation": args.implementation}
            meta["pooling"] = args.pooling
            json.dump({**meta, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
