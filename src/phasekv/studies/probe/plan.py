"""What a run will score, before it scores, and its progress while it does.

`plan_pairs` counts, over the chunks a run is scored in, the prompts, the distinct (context,
answer) pairs (identical prompts within a chunk are one forward row, or one request through an
endpoint: `scoring.distinct_pairs`) and the batches the scorer will cut them into, exactly as
`scoring.score_answers` and `BatchedScorer.logprobs` will. `ScoringProgress` is the progress bar
over those rows, moved after every batch (every request), with an estimate of the whole run's time
from its first batches.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from tqdm.auto import tqdm

from phasekv.planning import format_seconds
from phasekv.scoring import distinct_pairs, rows_by_answer_length

WARMUP_BATCHES = 2  # batches timed before the run's time is estimated


@dataclass(frozen=True)
class ScoringPlan:
    """Counts of one run. `n_rows`: distinct prompts forwarded (requests sent through an endpoint);
    `n_batches`: forward passes of up to `batch_size` rows (endpoints: requests, `batch_size` = the
    concurrency); `longest`: tokens in the longest forwarded sequence; `design`: the probe's own
    counts (residue groups, units, placements, ...), in the order they are printed."""

    n_prompts: int
    n_rows: int
    n_batches: int
    batch_size: int
    longest: int
    requests: bool = False
    design: dict[str, int | str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "n_prompts": self.n_prompts,
            "n_rows": self.n_rows,
            "n_batches": self.n_batches,
            "batch_size": self.batch_size,
            "longest_sequence": self.longest,
            "requests": self.requests,
            "design": dict(self.design),
        }

    def describe(self) -> str:
        """A few lines for the terminal."""
        design = ", ".join(f"{name} {value}" for name, value in self.design.items())
        if self.requests:
            work = f"{self.n_rows} distinct requests (identical prompts sent once; cached answers are not re-sent)"
            batching = f"{self.batch_size} requests in flight"
        else:
            work = f"{self.n_rows} distinct prompts scored (identical prompts in a chunk scored once)"
            batching = f"{self.n_batches} forward passes of up to {self.batch_size} prompts"
        return f"plan: {self.n_prompts} prompts; {work}; {batching}; longest sequence {self.longest} tokens" + (
            f"\n      {design}" if design else ""
        )


def plan_pairs(
    chunks: Iterable[tuple[Sequence[Sequence[int]], Sequence[Sequence[int]]]],
    batch_size: int,
    *,
    requests: bool = False,
    design: dict[str, int | str] | None = None,
) -> ScoringPlan:
    """The plan of scoring `chunks`, each (contexts, answers) passed to one `score_answers` call."""
    n_prompts = n_rows = n_batches = longest = 0
    for contexts, answers in chunks:
        pairs, _ = distinct_pairs(contexts, answers)
        n_prompts += len(contexts)
        n_rows += len(pairs)
        for rows in rows_by_answer_length(pairs).values():
            n_batches += -(-len(rows) // batch_size)
        # a forwarded sequence is the context and all but the last answer token
        longest = max([longest, *(len(c) + len(a) - 1 for c, a in pairs)])
    return ScoringPlan(n_prompts, n_rows, n_batches, batch_size, longest, requests, dict(design or {}))


class ScoringProgress:
    """A progress bar over a plan's rows; call it with the rows just scored (the `progress`
    callback of `score_answers`). Prints the plan before the bar starts and, once `WARMUP_BATCHES`
    batches after the first have been timed (the first carries one-off costs), the estimated time
    of the whole run: the time so far plus the rows left at the timed rate."""

    def __init__(self, plan: ScoringPlan, desc: str, file=None):
        self.plan = plan
        self.file = sys.stderr if file is None else file
        tqdm.write(plan.describe(), file=self.file)
        self.bar = tqdm(total=plan.n_rows, desc=desc, unit="request" if plan.requests else "prompt", file=self.file)
        self._start = time.perf_counter()
        self._timed_from: tuple[float, int] | None = None  # (time, rows) when the first batch was done
        self._updates = 0
        self.estimate_s: float | None = None

    def __call__(self, rows: int) -> None:
        self.bar.update(rows)
        self._updates += 1
        now = time.perf_counter()
        if self._updates == 1:
            self._timed_from = (now, self.bar.n)
        elif self._updates == 1 + WARMUP_BATCHES * (self.plan.batch_size if self.plan.requests else 1):
            self._estimate(now)

    def _estimate(self, now: float) -> None:
        since, rows_then = self._timed_from
        timed_rows, left = self.bar.n - rows_then, self.plan.n_rows - self.bar.n
        if left <= 0 or timed_rows <= 0 or now <= since:
            return
        self.estimate_s = now - self._start + left * (now - since) / timed_rows
        self.bar.write(
            f"estimated total time: about {format_seconds(self.estimate_s)} (an estimate: {left} rows left at the "
            f"rate of {timed_rows} rows timed after the first batch)",
            file=self.file,
        )

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> ScoringProgress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def scores_by_request(scorer) -> bool:
    """Whether `scorer` scores answers itself, one request per distinct prompt (an endpoint)."""
    return hasattr(scorer, "score_answers")
