"""A kvpress press scored one row at a time vs rows of equal lengths prefilled together, measured in one run.

Runs the presses profile's lookup (SmolLM2 by default, natural template, prefix protocol: every prompt has the same
length) with `--mappings` mappings under each press twice: batch 1 (one prefill per prompt, kvpress's own way) and
batch `--batch-size` (rows prefilled together where the press compresses each row on its own). Prints the wall
time of each, their ratio, the largest difference between the two runs' answer log-probs and whether every
prompt's correctness agrees. Needs the kvpress environment (scripts/kvpress_venv.sh):

    OMP_NUM_THREADS=1 .venv-kvpress/bin/python benchmarks/bench_press.py --presses knorm,snapkv,streaming,block8-knorm
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from dataclasses import replace

import numpy as np
import torch
import transformers

from phasekv.scoring import load_scorer
from phasekv.scoring.press_question import bind_question, question_tokens
from phasekv.studies.presses.options import DEFAULT_MODEL, PRESSES
from phasekv.studies.probe.run import run_lookup


def score(model: str, press: str, options, batch_size: int) -> tuple[float, dict]:
    scorer = load_scorer(model, press=press, batch_size=batch_size, threads=1, workers=1)
    bind_question(scorer, question_tokens(scorer.tokenizer, options))
    start = time.perf_counter()
    result = run_lookup(scorer, options, n_resamples=100, progress=False)
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--presses", default="knorm,snapkv,streaming,block8-knorm,chunkkv8")
    parser.add_argument("--mappings", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(1)
    transformers.utils.logging.disable_progress_bar()
    options = replace(PRESSES.lookup, n_mappings=args.mappings)
    print(f"{args.model}, presses lookup with {args.mappings} mappings, one thread, {platform.processor() or 'cpu'}")
    print(f"load average at the start: {' / '.join(f'{x:.1f}' for x in os.getloadavg())}")
    batched = f"batch {args.batch_size} (s)"
    print(f"| press | prefills | batch 1 (s) | {batched} | ratio | max log-prob diff | same correct |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for press in args.presses.split(","):
        one_s, one = score(args.model, press, options, 1)
        many_s, many = score(args.model, press, options, args.batch_size)
        a, b = (np.array(r["prompt_records"]["columns"]["answer_logprob"]) for r in (one, many))
        same = one["prompt_records"]["columns"]["correct"] == many["prompt_records"]["columns"]["correct"]
        prefills = many["model"]["press"]["kv_entries"]["prefills"]
        ratio, diff = one_s / many_s, abs(a - b).max()
        print(f"| {press} | {prefills} | {one_s:.1f} | {many_s:.1f} | {ratio:.2f} | {diff:.2e} | {same} |")
    print(f"load average at the end: {' / '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
