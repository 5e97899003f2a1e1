"""The one cache of a reproduction's finished work: probe results, analyses (the design comparison's too) and the
presses profile's cells.

A result JSON carries, under "reproduce", the key of what produced it: the study, its options as a dict, the
SHA-256 of every file of the checkpoint it measured but the optimiser state (its contents, not its path: a
retrained or copied run is keyed on its weights), the phasekv version and the SHA-256 of the statistics' source
(`phasekv.stats`: a changed verdict rule or test makes every stored verdict stale). A rerun reuses a result iff its
stored key equals the key it would be computed under; anything else (missing, torn, foreign or changed) is
computed again, except a result whose key differs in the statistics' hash alone (`scored_under`): its outcomes
are still the model's, so the presses profile judges it again from its records instead of scoring it again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, is_dataclass
from functools import lru_cache
from pathlib import Path

from ..pretrained import sha256
from ..results.record import write_results
from ..train.checkpoint import TRAINER_FILE
from ..version import __version__


def _normalised(value) -> object:
    """`value` as it reads back from JSON (tuples become lists), so keys compare equal after a rerun."""
    return json.loads(json.dumps(value))


@lru_cache(maxsize=256)
def _hashes(directory: str, stamp: tuple) -> dict[str, str]:
    return {name: sha256(Path(directory) / name) for name, _, _ in stamp}


def checkpoint_hash(checkpoint: Path) -> dict[str, str]:
    """{file name: SHA-256} of a checkpoint's (or HF model directory's) model files (the optimiser state does not
    change what the model answers), hashed once per process while the files' sizes and times are unchanged."""
    checkpoint = Path(checkpoint).resolve()
    files = sorted(p for p in checkpoint.iterdir() if p.is_file() and p.name != TRAINER_FILE)
    stamp = tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    return _hashes(str(checkpoint), stamp)


PHASEKV_SOURCE = Path(__file__).resolve().parent.parent


@lru_cache(maxsize=8)
def source_hash(*packages: str) -> str:
    """SHA-256 over the source files of phasekv's `packages` (e.g. "stats"), in path order."""
    digest = hashlib.sha256()
    for package in packages:
        for path in sorted((PHASEKV_SOURCE / package).rglob("*.py")):
            name = path.relative_to(PHASEKV_SOURCE).as_posix()
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def analysis_hash() -> str:
    """SHA-256 over the source files of `phasekv.stats`: what turns outcomes into verdicts."""
    return source_hash("stats")


# what turns a model's weights into its answers: a change here makes every cached answer stale
ANSWERING_PACKAGES = ("cache", "model", "attention", "compress", "scoring")


def result_key(study: str, options: dict, checkpoint: Path | None) -> dict:
    """What produced a result: the study, its options (dataclasses become dicts), the checkpoint's hash (None
    for a study without a model) and the software (the phasekv version, the statistics' source)."""
    options = {name: asdict(value) if is_dataclass(value) else value for name, value in options.items()}
    return _normalised(
        {
            "study": study,
            "options": options,
            "checkpoint": None if checkpoint is None else checkpoint_hash(checkpoint),
            "phasekv": __version__,
            "analysis": analysis_hash(),
        }
    )


def _stored(path: Path) -> tuple[dict, dict] | None:
    """(the result at `path`, its stored key), or None when it is missing, torn or has no key."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
    stored = data.get("reproduce") if isinstance(data, dict) else None
    return (data, stored) if isinstance(stored, dict) else None


def stored_result(path: Path, key: dict) -> dict | None:
    """The result at `path` when its stored key equals `key`, else None (missing, torn, foreign or changed)."""
    found = _stored(path)
    return found[0] if found is not None and found[1] == _normalised(key) else None


def scored_under(path: Path, key: dict) -> dict | None:
    """The result at `path` when its stored key equals `key` in everything but the statistics' hash ("analysis"):
    the same study, options, checkpoint and code version scored it, so its per-prompt outcomes stand and only
    its summary and verdict are stale; else None."""
    found = _stored(path)
    if found is None:
        return None
    data, stored = found
    return data if {**stored, "analysis": None} == {**_normalised(key), "analysis": None} else None


def store_result(path: Path, key: dict, result: dict) -> dict:
    """`result` with `key` added under "reproduce", written atomically to `path`."""
    result["reproduce"] = _normalised(key)
    write_results(result, path)
    return result


def cached_result(path: Path, key: dict, compute: Callable[[], dict]) -> tuple[dict, bool]:
    """(result, reused): the stored result at `path` when its key equals `key`, else `compute()` stored with it."""
    stored = stored_result(path, key)
    if stored is not None:
        return stored, True
    return store_result(path, key, compute()), False
