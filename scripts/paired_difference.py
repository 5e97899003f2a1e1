"""Paired difference of mean accuracy between two lookup results of the same prompts (same design and seed, e.g. two
presses): B minus A over all prompts and over distinct prompts, with a 95% bootstrap interval over the units
(mappings), 2000 resamples, seed 0.

    .venv/bin/python scripts/paired_difference.py A.json B.json
"""

import json
import sys

import numpy as np

a, b = (json.load(open(p))["prompt_records"]["columns"] for p in sys.argv[1:3])
if a["prompt_id"] != b["prompt_id"] or a["target_position"] != b["target_position"]:
    sys.exit("the two results do not hold the same prompts in the same order: run both with the same options and seed")
unit = np.array(a["unit"])
ca, cb = np.array(a["correct"], float), np.array(b["correct"], float)
pid = np.array(a["prompt_id"])
first = np.unique(pid, return_index=True)[1]  # each distinct prompt once


def diff(rows):
    return 100 * (cb[rows].mean() - ca[rows].mean())


units = np.unique(unit)
by_unit = {u: np.flatnonzero(unit == u) for u in units}
by_unit_distinct = {u: np.intersect1d(by_unit[u], first) for u in units}
rng = np.random.default_rng(0)
for name, groups in (("all prompts", by_unit), ("distinct prompts", by_unit_distinct)):
    point = diff(np.concatenate(list(groups.values())))
    boot = [diff(np.concatenate([groups[u] for u in rng.choice(units, len(units))])) for _ in range(2000)]
    lo, hi = np.percentile(boot, [2.5, 97.5])
    print(f"{name}: {sys.argv[2]} - {sys.argv[1]} = {point:+.1f} points [{lo:+.1f}, {hi:+.1f}] ({len(units)} mappings)")
