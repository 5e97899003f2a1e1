"""Long context: one forward pass of a tiny compressed model over a 131,072-token prompt (the needle
probe's size), in a fresh subprocess per mode, reporting its wall time and peak RSS (ru_maxrss).

Modes: `forward` (one `model(ids)` call under inference_mode) and `prefill` (the same prompt fed
through `phasekv.cache.generate.prefill(model, ids, cache, chunk_size)`). Target: peak
RSS under 4 GB. The baseline RSS of a subprocess that only imports torch and builds the model is
printed beside it.

    .venv/bin/python benchmarks/bench_long_context.py --length 131072 --modes forward,prefill --out long.json
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

TARGET_GIB = 4.0


def worker(preset: str, length: int, mode: str, chunk: int, threads: int) -> dict:
    import torch

    from phasekv.cache import KVCache
    from phasekv.cache.generate import prefill
    from phasekv.model import PhaseKVModel, preset_config

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = PhaseKVModel(preset_config(preset, "tiny")).eval()
    ids = torch.randint(0, model.config.vocab_size, (1, length), generator=torch.Generator().manual_seed(0))
    base_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with torch.inference_mode():
        if mode == "forward":
            logits = model(ids)
        elif mode == "prefill":
            logits = prefill(model, ids, KVCache.for_model(model), chunk)
        elif mode == "idle":
            logits = torch.zeros(1, 1, 1)
        else:
            raise ValueError(mode)
    seconds = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return dict(
        preset=preset, T=length, mode=mode, chunk=chunk if mode == "prefill" else None, seconds=seconds,
        peak_rss_gib=peak_kib / 2**20, before_rss_gib=base_kib / 2**20,
        finite=bool(torch.isfinite(logits[0, -1]).all()),
    )  # fmt: skip


def run_mode(preset: str, length: int, mode: str, chunk: int, threads: int, timeout: float) -> dict:
    cmd = [sys.executable, __file__, "--worker", "--preset", preset, "--length", str(length), "--modes", mode]
    cmd += ["--chunk", str(chunk), "--threads", str(threads)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return dict(preset=preset, T=length, mode=mode, error=f"timed out after {timeout:.0f} s")
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
        return dict(preset=preset, T=length, mode=mode, error=tail[0])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="w8s4-1kv")
    parser.add_argument("--length", type=int, default=131072)
    parser.add_argument("--modes", default="forward,prefill")
    parser.add_argument("--chunk", type=int, default=8192, help="prefill chunk size")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: see README, shared machine)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per subprocess")
    parser.add_argument("--out", default=None, help="write the table as JSON here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.preset, args.length, args.modes, args.chunk, args.threads)))
        return
    print(f"long context: tiny {args.preset}, T = {args.length}, float32, batch 1, {args.threads} threads, one run")
    print(f"{'mode':>16} {'seconds':>8} {'tokens/s':>8} {'peak RSS GiB':>12} {'< 4 GB':>6}")
    rows = []
    for mode in ["idle", *args.modes.split(",")]:
        row = run_mode(args.preset, args.length, mode, args.chunk, args.threads, args.timeout)
        rows.append(row)
        label = f"prefill/{args.chunk}" if mode == "prefill" else mode
        if "error" in row:
            print(f"{label:>16} failed: {row['error']}")
            continue
        # 4 GB read as 4 GiB would be generous by 7%; compare against 4e9 bytes
        met = row["peak_rss_gib"] * 2**30 < TARGET_GIB * 1e9
        row["met"] = met if mode != "idle" else None
        rate = "-" if mode == "idle" else f"{args.length / row['seconds']:.0f}"
        seconds = "-" if mode == "idle" else f"{row['seconds']:.1f}"
        print(
            f"{label:>16} {seconds:>8} {rate:>8} {row['peak_rss_gib']:>12.2f} "
            f"{'-' if mode == 'idle' else ('yes' if met else 'no'):>6}"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump(dict(vars(args), rows=rows), f, indent=2)


if __name__ == "__main__":
    main()
