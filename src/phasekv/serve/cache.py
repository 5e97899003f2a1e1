"""The on-disk results cache of an endpoint audit: one JSON line per answered request.

Each line is `{"key": ..., "kind": ..., "result": ...}`, appended and flushed as soon as the
answer arrives, so an interrupted audit resumes without re-sending anything answered. The key is
a SHA-256 of (served model, request kind, token ids, request details): one file may hold several
models. A last line cut off mid-write is ignored; any other unreadable line is an error.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

from .errors import EndpointError


def request_key(served_model: str, kind: str, ids: list[int], detail: object = None) -> str:
    """The cache key of one request."""
    text = json.dumps([served_model, kind, list(ids), detail], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class ResultCache:
    """Answered requests by key, in memory and (when `path` is given) in a JSONL file."""

    def __init__(self, path: str | Path | None = None):
        self.path = None if path is None else Path(path)
        self._results: dict[str, object] = {}
        self._lock = threading.Lock()
        self._torn = False  # the file does not end with a newline (a write was cut off)
        if self.path is not None and self.path.is_file():
            self._load(self.path)

    def _load(self, path: Path) -> None:
        text = path.read_text()
        self._torn = bool(text) and not text.endswith("\n")
        lines = text.splitlines()
        for number, line in enumerate(lines, 1):
            try:
                record = json.loads(line)
                self._results[record["key"]] = record["result"]
            except (json.JSONDecodeError, KeyError, TypeError):
                if number < len(lines):
                    raise EndpointError(f"results cache {path} line {number} is unreadable") from None

    def __len__(self) -> int:
        return len(self._results)

    def get(self, key: str) -> object | None:
        """The cached result of a request, or None."""
        return self._results.get(key)

    def put(self, key: str, kind: str, result: object) -> None:
        """Record an answer (and append it to the file at once)."""
        with self._lock:
            self._results[key] = result
            if self.path is None:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            line = json.dumps({"key": key, "kind": kind, "result": result}) + "\n"
            with self.path.open("a") as f:
                f.write("\n" + line if self._torn else line)
                f.flush()
            self._torn = False
