"""The on-disk results cache of an endpoint audit (and a local model's answer cache, see
`phasekv.scoring.answers.CachedAnswers`: no canaries, its fingerprint hashes the model's files and phasekv's
answering code): a fingerprint header, then one JSON line per answer or check.

The first line is `{"fingerprint": {...}, "fingerprint_id": ..., "canaries": {...}}`: what answers the
requests (the endpoint URL, the served model name, the server's model card, the tokenizer's hash, the
request options that change answers) and how it answered the canary prompts (see `canary`: the card
alone cannot tell other weights behind the same card). A cache is only ever used for the fingerprint
it was written for, by a server whose canaries agree with the stored ones within the tolerance: else
`claim` refuses (never mixes two models' answers).

The header is check 0. Every later check of the server's fingerprint that passed (the start of each
audit, after every failed request, see `client`) is a line `{"check": n, "canaries": {...},
"canary_difference": ...}`, and every answer is a line `{"key": ..., "kind": ..., "result": ...,
"check": n}` tied to the last check that passed before it was accepted, appended and flushed as soon
as the answer arrives, so an interrupted audit resumes without re-sending anything answered. Answers
found to be possibly another model's are removed again (`discard`, the file rewritten atomically).
A last line cut off mid-write (a crash) is cut from the file on loading, and `notice` says so; any
other unreadable line, or an answer tied to no check (written by an older phasekv), is an error.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

from ..files import disk_errors, write_atomic, write_text_atomic
from .canary import DEFAULT_TOLERANCE, canary_difference
from .errors import EndpointError

START_FRESH = "start fresh with --cache NEW_FILE (or --no-cache)"


def request_key(served_model: str, kind: str, ids: list[int], detail: object = None) -> str:
    """The cache key of one request."""
    text = json.dumps([served_model, kind, list(ids), detail], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def fingerprint_id(fingerprint: dict) -> str:
    """A short stable hash of a fingerprint (key order does not matter)."""
    text = json.dumps(fingerprint, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class ResultCache:
    """Answered requests by key, in memory and (when `path` is given) in a JSONL file.

    `fingerprint` (None: just read the file) is checked against the file's header at once, see `claim`.
    """

    def __init__(self, path: str | Path | None = None, fingerprint: dict | None = None, canaries: dict | None = None):
        self.path = None if path is None else Path(path)
        self.fingerprint: dict | None = None  # the header's, once read or claimed
        self.canaries: dict | None = None  # the header's canary answers, once read or claimed
        self.notice: str | None = None  # what loading repaired, for the user
        self.last_check = 0  # the last check that passed: what the answers put now are tied to
        self._unwritten_check: dict | None = None  # its line, until an answer tied to it is written
        self._results: dict[str, object] = {}
        self._lock = threading.Lock()
        if self.path is not None and self.path.is_file():
            self._load(self.path)
        if fingerprint is not None:
            self.claim(fingerprint, canaries)

    def _load(self, path: Path) -> None:
        raw = path.read_bytes()
        complete = raw[: raw.rfind(b"\n") + 1]
        if len(complete) < len(raw):  # a write cut off by a crash: only ever the last line
            tail = raw[len(complete) :]
            with path.open("r+b") as f:
                if self._parse(tail) is not None:  # the line is whole, only its newline is missing
                    f.seek(len(raw))
                    f.write(b"\n")
                    complete = raw + b"\n"
                    self.notice = f"results cache {path}: completed a last line that lacked its newline"
                else:
                    f.truncate(len(complete))
                    self.notice = (
                        f"results cache {path}: cut a torn last line ({len(tail)} bytes, a write cut off by a "
                        "crash); its request will be sent again"
                    )
        lines = complete.decode(errors="replace").splitlines()
        checks = {0}
        for number, line in enumerate(lines, 1):
            record = self._parse(line.encode())
            if number == 1 and record is not None and "fingerprint" in record:
                self.fingerprint = record["fingerprint"]
                self.canaries = record.get("canaries")
            elif record is not None and "key" in record and "result" in record:
                if "check" not in record:
                    raise EndpointError(
                        f"results cache {path} holds answers tied to no check of the server's fingerprint (written "
                        f"by an older phasekv, which could mix two models' answers after a restart); {START_FRESH}"
                    )
                if record["check"] not in checks:
                    raise EndpointError(
                        f"results cache {path} line {number} is tied to check {record['check']!r}, which no earlier "
                        f"line records: the file was edited or mixed with another; {START_FRESH}"
                    )
                problem = result_problem(record.get("kind"), record["result"])
                if problem is not None:
                    raise EndpointError(
                        f"results cache {path} line {number}: its answer (kind {record.get('kind')!r}) has the wrong "
                        f"form ({problem}): the file was edited or written by another program; delete that line (its "
                        f"request is then sent again), or {START_FRESH}"
                    )
                self._results[record["key"]] = record["result"]
            elif number > 1 and record is not None and isinstance(record.get("check"), int) and "canaries" in record:
                checks.add(record["check"])
                self.last_check = max(self.last_check, record["check"])
            else:
                raise EndpointError(
                    f"results cache {path} line {number} is unreadable (only a last line can be torn by a crash): "
                    f"delete that line, or {START_FRESH}"
                )

    @staticmethod
    def _parse(line: bytes) -> dict | None:
        try:
            record = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
        return record if isinstance(record, dict) else None

    def check(self, fingerprint: dict) -> None:
        """EndpointError when the file was written for another fingerprint (or before fingerprints):
        cheap, so a wrong cache is refused before anything is sent."""
        if self.fingerprint is None and self._results:
            raise EndpointError(
                f"results cache {self.path} has no fingerprint (written by an older phasekv): its answers cannot be "
                f"matched to a server; {START_FRESH}"
            )
        if self.fingerprint is not None and fingerprint_id(self.fingerprint) != fingerprint_id(fingerprint):
            differ = sorted(k for k in fingerprint.keys() | self.fingerprint.keys()
                            if self.fingerprint.get(k) != fingerprint.get(k))  # fmt: skip
            raise EndpointError(
                f"results cache {self.path} holds answers of another server or model (differs in: "
                f"{', '.join(differ)}); refusing to mix them: {START_FRESH}"
            )

    def claim(self, fingerprint: dict, canaries: dict | None = None, tolerance: float = DEFAULT_TOLERANCE) -> float:
        """Use this cache for `fingerprint` and the server's `canaries` answers: write the header into a
        new file, or check the file's (see `check`; the canaries must agree within `tolerance` nats).
        Returns the largest canary difference (0 for a new cache). EndpointError when refused."""
        self.check(fingerprint)
        if self.fingerprint is not None:
            if canaries is None:
                return 0.0
            if self.canaries is None and self._results:
                raise EndpointError(
                    f"results cache {self.path} has no canary answers (written by an older phasekv): its answers "
                    f"cannot be matched to the weights behind the server; {START_FRESH}"
                )
            if self.canaries is not None:
                difference = canary_difference(self.canaries, canaries)
                if not difference <= tolerance:
                    raise EndpointError(
                        f"results cache {self.path} holds answers of other weights: the server answers the canary "
                        f"prompts differently now (by {difference:.3g} nats, tolerance {tolerance:g}; the model "
                        f"card did not change); {START_FRESH}, or raise --canary-tolerance for a nondeterministic "
                        "server"
                    )
                self.passed(canaries, difference)
                return difference
        self.fingerprint, self.canaries = fingerprint, canaries
        if self.path is not None:
            header = {"fingerprint": fingerprint, "fingerprint_id": fingerprint_id(fingerprint)}
            if canaries is not None:
                header["canaries"] = canaries
            # the file holds no answers here (else it was refused or returned above): a header alone is rewritten
            write_text_atomic(self.path, json.dumps(header) + "\n")
        return 0.0

    def passed(self, canaries: dict, difference: float) -> None:
        """Record a check of the fingerprint that passed (the server's canary answers now, their largest
        difference from the header's): the answers put from now on are tied to it. Its line is written with
        the first of them, so a run that sends nothing leaves the file as it was."""
        with self._lock:
            self.last_check += 1
            self._unwritten_check = {"check": self.last_check, "canaries": canaries, "canary_difference": difference}

    def discard(self, keys: set[str]) -> None:
        """Forget the answers of `keys` (possibly another model's) and rewrite the file without them, atomically:
        an interruption leaves either the old file or the new one."""
        with self._lock:
            for key in keys:
                self._results.pop(key, None)
            if self.path is None or not keys:
                return
            kept = [line for line in self.path.read_text().splitlines(keepends=True)
                    if (self._parse(line.encode()) or {}).get("key") not in keys]  # fmt: skip
            write_atomic(self.path, lambda tmp: Path(tmp).write_text("".join(kept)))

    def __len__(self) -> int:
        return len(self._results)

    def get(self, key: str) -> object | None:
        """The cached result of a request, or None."""
        return self._results.get(key)

    def put(self, key: str, kind: str, result: object) -> None:
        """Record an answer, tied to the last check that passed (and append it to the file at once)."""
        self.put_many([(key, kind, result)])

    def put_many(self, answers: list[tuple[str, str, object]]) -> None:
        """Record (key, kind, result) answers as `put` does, appended to the file in one write."""
        with self._lock:
            lines = []
            for key, kind, result in answers:
                self._results[key] = result
                lines.append(json.dumps({"key": key, "kind": kind, "result": result, "check": self.last_check}))
            if self.path is not None and lines:
                if self._unwritten_check is not None:
                    lines.insert(0, json.dumps(self._unwritten_check))
                    self._unwritten_check = None
                self._append("\n".join(lines) + "\n")

    def _append(self, line: str) -> None:
        # a full disk is one line; a line it cut short is cut again on loading, every answer before it kept
        with disk_errors(self.path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as f:
                f.write(line)
                f.flush()


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _token(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def result_problem(kind: object, result: object) -> str | None:
    """What is wrong with a cached `result` of a request of `kind` (as `client` stores it), or None: a line
    of valid JSON holding something else would fail later, far from its cause."""
    if kind == "echoes":
        return None if isinstance(result, bool) else "expected true or false"
    if kind == "answer":
        fields = ("logprobs", "top_ids", "top_logprobs")
        if not isinstance(result, dict) or not all(isinstance(result.get(f), list) for f in fields):
            return f"expected an object with the lists {', '.join(fields)}"
        if len({len(result[f]) for f in fields}) != 1:
            return "its lists differ in length"
        if not all(_number(v) for f in ("logprobs", "top_logprobs") for v in result[f]):
            return "a log-prob that is not a number"
        return None if all(map(_token, result["top_ids"])) else "a top id that is not an integer"
    if kind == "top":
        pairs = isinstance(result, list) and result
        if pairs and all(isinstance(p, list) and len(p) == 2 and _token(p[0]) and _number(p[1]) for p in result):
            return None
        return "expected a non-empty list of [token id, log-prob] pairs"
    if kind == "next":
        if isinstance(result, list) and result and all(map(_number, result)):
            return None
        return "expected a non-empty list of log-probs"
    if kind == "scored":  # a local model's answer (`phasekv.scoring.answers`)
        if (
            isinstance(result, list)
            and len(result) == 3
            and _number(result[0])
            and isinstance(result[1], bool)
            and _token(result[2])
        ):
            return None
        return "expected [log-prob, correct (true or false), top-1 token id]"
    return None  # not a kind `client` or `answers` writes: its form is its writer's
