"""The run log: one JSON object per line in `run_dir/log.jsonl`.

Training records: {"step", "loss", "lr", "grad_norm", "tokens_per_s", "tokens", "elapsed_s"} (loss and
grad_norm averaged over the steps since the previous record), plus "static_concentration" (likewise
averaged; unweighted) when the run has a static_concentration_weight. Validation records: {"step", "val_loss",
"val_accuracy"} (top-1 accuracy on scored tokens). On resume, records after the checkpoint's step
(written by the killed run) are dropped, so the log reads as if the run had never stopped.
"""

from __future__ import annotations

import json
from pathlib import Path

from phasekv.files import disk_errors, write_atomic

LOG_FILE = "log.jsonl"


def read_log(run_dir: str | Path) -> list[dict]:
    """All records of a run's log (an empty list when there is none)."""
    path = Path(run_dir) / LOG_FILE
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class RunLog:
    """Appends records to log.jsonl; `enabled=False` (non-main ranks) writes nothing."""

    def __init__(self, run_dir: Path, start_step: int, enabled: bool = True):
        self.path = run_dir / LOG_FILE
        self.enabled = enabled
        if enabled and self.path.is_file():
            kept = [r for r in read_log(run_dir) if r["step"] <= start_step]
            text = "".join(json.dumps(r) + "\n" for r in kept)
            write_atomic(self.path, lambda tmp: Path(tmp).write_text(text))

    def write(self, record: dict) -> None:
        if self.enabled:
            with disk_errors(self.path), self.path.open("a") as handle:
                handle.write(json.dumps(record) + "\n")
