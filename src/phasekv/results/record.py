"""The envelope every results file shares (model, scoring settings, software, timing), the
per-prompt records, the atomic JSON writer and the prompt dump.

Per-prompt records (`prompt_records`), the "prompt_records" field of every probe's result: one
entry per scored prompt, stored by column (a dict of equally long lists, index i = prompt i)::

    {"unit": "mapping", "n": 1728,
     "columns": {"target_position": [...], "query_position": [...], "residue": [...], "unit": [...],
                 "placement": [...], "correct": [...], "answer_logprob": [...]}}

- target_position: t_K, the index of the (first) target key token (flip: of the context's first
  token); query_position: the index where the answer's first token is predicted (the last one);
- residue: t_K mod the run's modulus (flip: the filler length mod the period);
- unit: index of the content unit, whose kind "unit" names (lookup: mapping, needle: haystack,
  flip: filler family, with the family names under "unit_names"); placement: index of the
  repeated positions of one unit in one residue group (flip: always 0);
- correct: greedy decoding produces the whole answer (flip: the candidate); answer_logprob: the
  answer's summed teacher-forced log-prob (rounded to 6 decimals).

A probe may add columns (lookup and needle: prompt_id, equal for identical prompts, and with the grid
shift correct_grid_offset_{o}; flip: filler_length, and candidate, an index into "candidates"). Lists
of numbers are written on one line each (`results_json`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch

from ..files import write_atomic
from ..provenance import software_versions
from ..scoring import Scorer
from ..studies.probe.result import PROBE_SCHEMA
from .text import results_json

SCHEMA = PROBE_SCHEMA
METRIC = "full-vocabulary top-1 at every answer token (teacher forced = greedy decoding yields the answer)"


def prompt_prefix(tokenizer) -> list[int]:
    """[BOS] when the tokenizer puts BOS in front of every text, else []: prompts start the way
    the model's tokenizer starts any text, and positions count this prefix."""
    bos = tokenizer.bos_token_id
    ids = tokenizer("")["input_ids"]
    return [bos] if bos is not None and ids[:1] == [bos] else []


class RunClock:
    """Start time of a run; `envelope` fills the shared fields when the run ends."""

    def __init__(self) -> None:
        self.started_at = datetime.now(UTC).isoformat(timespec="seconds")
        self._start = time.perf_counter()

    def envelope(self, probe: str, scorer: Scorer, prefix_ids: list[int], **fields) -> dict:
        """The result dict: schema, probe, model, scoring settings, `fields`, software, wall time."""
        return {
            "schema": SCHEMA,
            "probe": probe,
            "model": scorer.describe(),
            "scoring": {
                "metric": METRIC,
                "batch_size": scorer.batch_size,
                "threads": getattr(scorer, "threads", torch.get_num_threads()),
                "workers": getattr(scorer, "workers", 1),
                "prompt_prefix_ids": prefix_ids,
                **({"answers": cache.describe()} if (cache := getattr(scorer, "answer_cache", None)) else {}),
            },
            **fields,
            "software": software_versions(),
            "started_at": self.started_at,
            "wall_time_s": round(time.perf_counter() - self._start, 3),
        }

    def lookup_analysis(self, analysis: str, schema: str, scorer: Scorer, **fields) -> dict:
        """The result dict of a mechanistic analysis over lookup prompts: the envelope under the analysis's own
        schema, the analysis named last."""
        result = self.envelope("lookup", scorer, prompt_prefix(scorer.tokenizer), **fields)
        return {**result, "schema": schema, "analysis": analysis}


RECORD_COLUMNS = ("target_position", "query_position", "residue", "unit", "placement", "correct", "answer_logprob")


def prompt_records(columns: Mapping[str, np.ndarray], unit: str, **extra) -> dict:
    """The "prompt_records" field (see the module docstring) from per-prompt arrays [N] named by
    RECORD_COLUMNS (more columns may follow); `extra` goes beside the columns (e.g. unit_names)."""
    missing = [name for name in RECORD_COLUMNS if name not in columns]
    if missing:
        raise ValueError(f"per-prompt records need the columns {missing}")
    lengths = {len(values) for values in columns.values()}
    if len(lengths) != 1:
        raise ValueError(f"per-prompt record columns differ in length: {sorted(lengths)}")
    out = {}
    for name, values in columns.items():
        values = np.asarray(values)
        if name == "answer_logprob":
            out[name] = [round(float(v), 6) for v in values]
        else:
            out[name] = values.tolist()
    return {"unit": unit, "n": lengths.pop(), **extra, "columns": out}


def write_results(result: dict, path: str | Path) -> Path:
    """Write `result` as indented JSON (`results_json`) to `path` atomically (temporary file, then os.replace)."""
    path = Path(path)
    text = results_json(result)
    write_atomic(path, lambda tmp: Path(tmp).write_text(text))
    return path


def dump_prompts(prompts: Iterable[dict], path: str | Path, tokenizer=None) -> int:
    """Write one JSON line per prompt to `path` atomically; returns the number of lines.

    Each dict holds `input_ids` and `answer_ids` (token ids) and any fields that describe the
    prompt (target_position, residue, ...); with a `tokenizer` the decoded "text" and
    "answer_text" are added (special tokens kept, so positions can be counted)."""
    path = Path(path)
    count = 0

    def write(tmp: str) -> None:
        nonlocal count
        with open(tmp, "w", encoding="utf-8") as f:
            for index, prompt in enumerate(prompts):
                line = {"index": index, **prompt}
                if tokenizer is not None:
                    line["text"] = tokenizer.decode(prompt["input_ids"])
                    line["answer_text"] = tokenizer.decode(prompt["answer_ids"])
                f.write(json.dumps(line) + "\n")
                count = index + 1

    write_atomic(path, write)
    return count
