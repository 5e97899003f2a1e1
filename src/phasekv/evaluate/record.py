"""The envelope every results file shares (model, scoring settings, software, timing) and the
atomic JSON writer."""

from __future__ import annotations

import json
import platform
import time
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import torch

from ..model.io import write_atomic
from ..scoring import Scorer

SCHEMA = "phasekv.eval/1"
METRIC = "full-vocabulary top-1 at every answer token (teacher forced = greedy decoding yields the answer)"
_PACKAGES = ("phasekv", "torch", "transformers", "tokenizers", "numpy", "scipy")


def software_versions() -> dict[str, str]:
    """Versions of Python and the packages a result depends on."""
    versions = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


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
                "threads": torch.get_num_threads(),
                "workers": getattr(scorer, "workers", 1),
                "prompt_prefix_ids": prefix_ids,
            },
            **fields,
            "software": software_versions(),
            "started_at": self.started_at,
            "wall_time_s": round(time.perf_counter() - self._start, 3),
        }


def write_results(result: dict, path: str | Path) -> Path:
    """Write `result` as indented JSON to `path` atomically (temporary file, then os.replace)."""
    path = Path(path)
    text = json.dumps(result, indent=2) + "\n"
    write_atomic(path, lambda tmp: Path(tmp).write_text(text))
    return path
