"""Benchmark: a full lookup evaluation on a `tiny` phasekv model, and building a 128K-token needle prompt.

Lookup: 24 residues x 256 mappings with the fewest placements that make the residue groups' target
moments exact (design size 24^2 = 576 per group, so 576 / gcd(256, 576) = 9 placements per
mapping): 256 x 24 x 9 = 55,296 prompts of 335 tokens. Under prefix padding a mapping lands on
only a few distinct positions per residue, so the scorer sees far fewer distinct prompts (printed).

    .venv/bin/python benchmarks/bench_lookup.py [--preset w8s8-1kv] [--threads 1] [--workers 2] [--batch-size 16]
        [--plain] [--dtype float32]

`--workers N` scores N batches at once, each on one thread; `--threads` sets torch's intra-op
threads (the old default was --threads 2 --workers 1 --batch-size 64). `--plain` scores with the
full forward pass (logits at every position, then gathered) instead of `PhaseKVModel.forward_at`.
The load average is printed next to the numbers: on a shared 2-core machine it decides a lot.
"""

from __future__ import annotations

import argparse
import os
import time

import torch

from phasekv.model import PhaseKVModel, preset_config
from phasekv.scoring import PhaseKVScorer
from phasekv.studies.probe.run import run_lookup
from phasekv.tasks.lookup import LookupOptions, make_lookup
from phasekv.tasks.needle import NeedleOptions, make_needle
from phasekv.tasks.tokenizer import build_word_tokenizer
from phasekv.tasks.vocab import task_vocab


def bench_needle_prompt(vocab) -> None:
    start = time.perf_counter()
    prompts = make_needle(vocab, NeedleOptions(context_length=131_072, n_records=16_000, n_haystacks=1)).prompts
    setup = time.perf_counter() - start
    start = time.perf_counter()
    prompt = prompts[0]
    build = time.perf_counter() - start
    print(f"needle: 128K-token prompt ({len(prompt.input_ids):,} tokens, 16,000 records) built in {build:.3f} s")
    print(f"        (run set-up with the position design: {setup:.3f} s)")


def bench_lookup(args, vocab, tokenizer) -> None:
    torch.manual_seed(0)
    model = PhaseKVModel(preset_config(args.preset, "tiny", vocab_size=len(tokenizer)))
    scorer = PhaseKVScorer(
        model,
        tokenizer,
        batch_size=args.batch_size,
        threads=args.threads,
        workers=args.workers,
        dtype=args.dtype,
        plain=args.plain,
    )
    options = LookupOptions(modulus=24, n_mappings=args.mappings, protocol=args.protocol)
    prompts = make_lookup(vocab, options).prompts
    distinct = len({(tuple(p.input_ids), tuple(p.answer_ids)) for p in prompts})
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    result = run_lookup(scorer, options, progress=not args.quiet)
    wall = time.perf_counter() - start
    load_after = os.getloadavg()
    n = result["n_prompts"]
    print(
        f"lookup: {args.preset}@tiny, {args.protocol} padding, {n:,} prompts "
        f"({options.n_mappings} mappings x 24 residues x {result['aggregation']['placements_per_mapping']} "
        f"placements, {len(prompts[0].input_ids)} tokens each; {distinct:,} distinct), "
        f"threads={torch.get_num_threads()}, workers {args.workers}, batch {args.batch_size}, {args.dtype}, "
        f"{'plain forward' if args.plain else 'forward_at'}"
    )
    print(f"        wall {wall:.1f} s = {n / wall:.1f} prompts/s ({distinct / wall:.1f} distinct prompts/s)")
    print(
        f"        load average {load_before:.2f} at the start, {load_after[0]:.2f} / {load_after[1]:.2f} "
        "(1 / 5 min) at the end"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="w8s8-1kv")
    parser.add_argument("--mappings", type=int, default=256)
    parser.add_argument("--protocol", default="prefix")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--plain", action="store_true", help="full forward pass, then gather (the reference)")
    parser.add_argument("--skip-needle", action="store_true")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args()
    tokenizer = build_word_tokenizer()
    vocab = task_vocab(tokenizer)
    if not args.skip_needle:
        bench_needle_prompt(vocab)
    bench_lookup(args, vocab, tokenizer)


if __name__ == "__main__":
    main()
