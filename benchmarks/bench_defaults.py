"""Benchmark: the scorers' default threads/workers against `--threads 1` and the old default, quiet and busy.

Times `run_lookup` end to end (the work of `phasekv eval lookup MODEL --records 16 --mappings 32`) on a random
`tiny` phasekv model under three settings, interleaved in every repetition so that all three see the same load:

- default: `threads` and `workers` not given (`phasekv.scoring.base.choose_parallelism`: one single-threaded
  worker per usable core);
- threads 1: `--threads 1` (one worker, one thread);
- old default: one worker on torch's own thread count (what `phasekv eval` did before it chose workers).

Twice: on the machine as it is ("quiet": nothing added), and "busy", with a busy-loop subprocess pinned to one
of this process's cores for the whole condition. Prints the median wall time of each setting and the ratios
the defaults must meet: busy, default / threads 1 <= 1.2; quiet, default / old default <= 1.1.

    .venv/bin/python benchmarks/bench_defaults.py [--reps 3] [--mappings 32] [--records 16] [--out FILE.json]

The load average is printed beside each condition: on a shared machine "quiet" is only as quiet as the others
let it be.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

from phasekv.model import PhaseKVModel, preset_config
from phasekv.scoring import PhaseKVScorer
from phasekv.scoring.base import usable_cores
from phasekv.studies.probe.run import run_lookup
from phasekv.tasks.lookup import LookupOptions
from phasekv.tasks.tokenizer import build_word_tokenizer

TORCH_THREADS = torch.get_num_threads()  # torch's own choice, read before anything sets it
SETTINGS = {
    "default": {},
    "threads 1": {"threads": 1},
    "old default": {"threads": TORCH_THREADS, "workers": 1},
}
LIMITS = {"busy": ("threads 1", 1.2), "quiet": ("old default", 1.1)}  # condition: (baseline, ratio at most)


def busy_loop() -> subprocess.Popen:
    """A Python busy loop pinned to the last core this process may use (it holds that core until stopped)."""
    loop = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(loop.pid, {max(os.sched_getaffinity(0))})
    return loop


def time_settings(model, tokenizer, options: LookupOptions, reps: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in SETTINGS}
    for _ in range(reps):
        for name, parallelism in SETTINGS.items():
            torch.set_num_threads(TORCH_THREADS)  # each setting starts from the process's default
            scorer = PhaseKVScorer(model, tokenizer, batch_size=16, **parallelism)
            start = time.perf_counter()
            run_lookup(scorer, options, n_resamples=200, progress=False)
            times[name].append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="repetitions of every setting (median reported)")
    parser.add_argument("--mappings", type=int, default=32)
    parser.add_argument("--records", type=int, default=16)
    parser.add_argument("--out", help="also write the numbers as JSON here")
    args = parser.parse_args()
    tokenizer = build_word_tokenizer()
    torch.manual_seed(0)
    model = PhaseKVModel(preset_config("w8s8-1kv", "tiny", vocab_size=len(tokenizer)))
    options = LookupOptions(n_records=args.records, n_mappings=args.mappings)
    default = PhaseKVScorer(model, tokenizer)
    print(
        f"{usable_cores()} usable cores (os.cpu_count() {os.cpu_count()}); torch's own threads {TORCH_THREADS}; "
        f"default: {default.workers} workers x {default.threads} thread; lookup {args.records} records, "
        f"{args.mappings} mappings, w8s8-1kv@tiny; median of {args.reps}"
    )
    report = {"usable_cores": usable_cores(), "torch_threads": TORCH_THREADS, "conditions": {}}
    for condition in ("quiet", "busy"):
        loop = busy_loop() if condition == "busy" else None
        load = os.getloadavg()[0]
        try:
            times = time_settings(model, tokenizer, options, args.reps)
        finally:
            if loop is not None:
                loop.kill()
                loop.wait()
        medians = {name: statistics.median(t) for name, t in times.items()}
        baseline, limit = LIMITS[condition]
        ratio = medians["default"] / medians[baseline]
        cells = ", ".join(f"{name} {medians[name]:.1f} s" for name in SETTINGS)
        print(f"{condition} (load {load:.2f} -> {os.getloadavg()[0]:.2f}): {cells}")
        verdict = "met" if ratio <= limit else "NOT met"
        print(f"{condition}: default / {baseline} = {ratio:.2f} (at most {limit}: {verdict})")
        report["conditions"][condition] = {"seconds": times, "median_s": medians, "ratio": ratio, "limit": limit}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
