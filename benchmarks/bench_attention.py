"""Attention layer forward+backward: compressed vs full attention (PyTorch SDPA), measured in one run.

For each sequence length T, builds the layer of the issue's shape (d_model 512, 8 query heads of dim
64, 1 KV head, local window 16, float32, batch 1) with full attention and with each compressed kind,
runs warm-up + `reps` timed forward+backward passes on the same threads, and prints the median
time ratio compressed / full beside the ratio of visible FLOPs (projections + compressor + the
attention work each query can see: the lower bound of the ratio). Peak memory is measured in a
fresh subprocess per (kind, T) as the growth of the resident set: peak RSS during one forward+backward
(the kernel's peak mark is reset first, where Linux allows; a 256-token pass before it loads code pages
and thread pools) minus the RSS before it.

On CUDA (`--device cuda`) the times are synchronised and peak memory is the growth of
`torch.cuda.max_memory_allocated` during one forward+backward, in the same process. `--size paper` is the
Qwen3-0.6B attention shape (d_model 1024, 16 heads x 128, 1 KV head); `--flex` routes the compressed layer
through flex_attention (`phasekv.attention.dispatch.USE_ON_CUDA`); lengths that run out of memory print "oom".

    .venv/bin/python benchmarks/bench_attention.py --lengths 1024,4096,8192,16384 --threads 2 --out bench.json
    python benchmarks/bench_attention.py --device cuda --dtype bfloat16 --size paper --lengths 8192,32768 --flex
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import statistics
import time

import torch

from phasekv.attention import Attention, dispatch
from phasekv.compress import PaperCompression, paper
from phasekv.config import ModelConfig
from phasekv.model.presets import DSV4_STYLE

LOCAL = 16
# (d_model, heads, head_dim, KV heads): the issue-7 layer, and the paper's (Qwen3-0.6B) attention
SIZES = {"issue": (512, 8, 64, 1), "paper": (1024, 16, 128, 1)}
D_MODEL, HEADS, HEAD_DIM, KV_HEADS = SIZES["issue"]


def use_size(size: str) -> None:
    global D_MODEL, HEADS, HEAD_DIM, KV_HEADS
    D_MODEL, HEADS, HEAD_DIM, KV_HEADS = SIZES[size]


KINDS = {
    "full": None,
    "w8s8": PaperCompression(8, 8, local_window=LOCAL),
    "w8s4": PaperCompression(8, 4, local_window=LOCAL),
    "dsv4": DSV4_STYLE,
}


def build(kind: str, device: str = "cpu", dtype: torch.dtype = torch.float32) -> Attention:
    torch.manual_seed(0)
    extra = KINDS[kind].model_defaults(HEAD_DIM)
    cfg = ModelConfig(
        hidden_size=D_MODEL, num_heads=HEADS, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM, compression=KINDS[kind], **extra
    )
    return Attention(cfg).to(device, dtype)


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
    param = next(layer.parameters())
    x = torch.randn(1, length, D_MODEL, device=param.device, dtype=param.dtype, requires_grad=True)
    times = []
    for i in range(reps + 1):  # the first pass warms up (and compiles, with flex)
        _sync(param.device)
        start = time.perf_counter()
        layer(x).sum().backward()
        _sync(param.device)
        if i:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cuda_peak_mib(layer: Attention, length: int) -> float:
    """Growth of the CUDA allocator's peak during one forward+backward (after a warm pass)."""
    param = next(layer.parameters())
    x = torch.randn(1, length, D_MODEL, device=param.device, dtype=param.dtype, requires_grad=True)
    layer(x).sum().backward()
    layer.zero_grad(set_to_none=False)
    x.grad = None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    layer(x).sum().backward()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / 2**20


def _peak_worker(kind: str, length: int, threads: int, queue, pooling: str, size: str) -> None:
    torch.set_num_threads(threads)
    use_size(size)
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


def peak_mib(kind: str, length: int, threads: int, pooling: str = "fused", size: str = "issue") -> float:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_peak_worker, args=(kind, length, threads, queue, pooling, size))
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
        "--pooling",
        default=paper.POOLING,
        choices=["fused", "plain"],
        help="paper compressor: fused (no window copy, the default) or plain (autograd over a window copy)",
    )
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--size", default="issue", choices=list(SIZES), help="issue: 512 wide; paper: Qwen3-0.6B")
    parser.add_argument("--flex", action="store_true", help="compressed layers on flex_attention (CUDA only)")
    parser.add_argument("--out", default=None, help="write the table as JSON here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    paper.POOLING = args.pooling
    dispatch.USE_ON_CUDA = args.flex
    use_size(args.size)
    dtype = getattr(torch, args.dtype)
    cuda = args.device.startswith("cuda")
    attention = "flex" if args.flex and cuda else "flash compressed attention"
    print(
        f"fwd+bwd, {args.dtype} on {args.device}, d_model {D_MODEL}, {HEADS} heads x {HEAD_DIM}, {KV_HEADS} KV head, "
        f"L={LOCAL}, {args.threads} threads, median of {args.reps}, {attention}, {args.pooling} pooling"
    )
    print(f"{'T':>6} {'kind':>5} {'full s':>8} {'comp s':>8} {'ratio':>6} {'FLOP ratio':>10} {'mem ratio':>9}")
    rows = []
    for length in (int(v) for v in args.lengths.split(",")):
        full_s, full_mem = measure("full", length, args, dtype)
        for kind in args.kinds.split(","):
            comp_s, comp_mem = measure(kind, length, args, dtype)
            # growth of the resident set; too small to compare below 16 MiB
            mem = comp_mem / full_mem if comp_mem is not None and full_mem is not None and full_mem >= 16 else None
            ratio = comp_s / full_s if comp_s is not None and full_s is not None else None
            row = dict(
                T=length, kind=kind, full_s=full_s, compressed_s=comp_s, ratio=ratio,
                flop_ratio=visible_flops(kind, length) / visible_flops("full", length), memory_ratio=mem,
                full_mib=full_mem, compressed_mib=comp_mem,
            )  # fmt: skip
            rows.append(row)
            print(
                f"{length:>6} {kind:>5} {_fmt(full_s, 8, 3)} {_fmt(comp_s, 8, 3)} {_fmt(ratio, 6, 2)} "
                f"{row['flop_ratio']:>10.2f} {_fmt(mem, 9, 2)}",
                flush=True,
            )
    if args.out:
        with open(args.out, "w") as f:
            meta = {k: getattr(args, k) for k in ("threads", "reps", "pooling", "device", "dtype")}
            json.dump({**meta, "size": args.size, "flex": args.flex, "rows": rows}, f, indent=2)


def measure(kind: str, length: int, args, dtype: torch.dtype) -> tuple[float | None, float | None]:
    """(median fwd+bwd seconds, peak MiB or None); (None, None) when CUDA runs out of memory."""
    if not args.device.startswith("cuda"):
        seconds = time_fwd_bwd(build(kind), length, args.reps)
        if args.no_memory:
            return seconds, None
        return seconds, peak_mib(kind, length, args.threads, args.pooling, args.size)
    try:
        layer = build(kind, args.device, dtype)
        seconds = time_fwd_bwd(layer, length, args.reps)
        return seconds, None if args.no_memory else cuda_peak_mib(layer, length)
    except torch.cuda.OutOfMemoryError:
        return None, None
    finally:
        torch.cuda.empty_cache()


def _fmt(value: float | None, width: int, digits: int) -> str:
    return f"{'oom/-' if value is None else f'{value:.{digits}f}':>{width}}"


if __name__ == "__main__":
    main()
