"""The plan of a long run, an estimate of its time from its first steps, and dry runs.

A run declares what it will compute as a `WorkPlan`: a title (what, on which model), counts (prompts,
targets, ...) and its stages, each a number of like steps (forward passes, Adam steps, checkpoints). It walks
each stage's steps through a `Planner`, which prints the plan before the first step, shows a bar over the steps, times
one step of every stage (the second: the first carries one-off costs, such as lazy initialisation and optimiser
state; a stage of one step is timed on it) and, once every stage has been timed, prints the estimated total time:
the time since the planner was made (the command's start: loading the model and building the prompts count) plus
every step left at its stage's timed rate.

A dry run (`Planner(dry_run=True)`) cuts every stage short once it is timed and, when the last stage has been
timed, stops the run with `DryRunDone`, which carries the projection: nothing more is computed and the run never
reaches the code that writes its result. Kept free of torch, so the theory and the analyses share it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from tqdm.auto import tqdm


def format_seconds(seconds: float) -> str:
    """`42 s`, `3.5 min` or `2.1 h`."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _short_seconds(seconds: float) -> str:
    """A step's time: `3 ms`, `0.42 s`, or `format_seconds` from 10 s."""
    if seconds < 0.1:
        return f"{1000 * seconds:.0f} ms" if seconds >= 0.001 else f"{1000 * seconds:.2f} ms"
    return f"{seconds:.2f} s" if seconds < 10 else format_seconds(seconds)


@dataclass(frozen=True)
class Stage:
    """`steps` like steps named `name`, each one `unit` (read as "N forward passes of up to 16 prompts")."""

    name: str
    steps: int
    unit: str


@dataclass(frozen=True)
class WorkPlan:
    """What a run will compute: `title` (the analysis and the model), `counts` (printed in order) and `stages`."""

    title: str
    stages: tuple[Stage, ...]
    counts: dict[str, int | str] = field(default_factory=dict)

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(f"the plan of {self.title!r} has no stage {name!r}")

    def describe(self) -> str:
        lines = [f"plan: {self.title}"]
        if self.counts:
            lines.append("      " + ", ".join(f"{name} {value}" for name, value in self.counts.items()))
        lines += [f"      {stage.name}: {stage.steps} {stage.unit}" for stage in self.stages]
        return "\n".join(lines)


class DryRunDone(Exception):
    """Raised by a dry run's planner once every stage has had its timed step."""

    def __init__(self, plan: WorkPlan, projected_s: float, rates: str):
        super().__init__(f"dry run of {plan.title}: projected {format_seconds(projected_s)}")
        self.plan, self.projected_s, self.rates = plan, projected_s, rates

    def describe(self) -> str:
        return (
            f"projected time: about {format_seconds(self.projected_s)} ({self.rates})\n"
            "dry run: one step of each stage timed (after one to warm up), nothing else computed, nothing written"
        )


class Planner:
    """Prints a run's plan, moves a bar over its steps, and estimates the run's time from one timed step of each stage.

    `quiet`: no plan, bars or estimate (a dry run always prints its plan). Runs call `start(plan)` once (a run
    nested in another, such as a sweep's Theorem 2 runs, walks its steps against the outer plan: a second
    `start` is ignored), then walk steps with `steps(name, iterable)` or `with step(name):`, or call
    `step_done(name)` after each step of a loop they do not own (`restart_clock()` before its first; a dry run
    cannot cut such a loop short, so its stage should be the last one a run times)."""

    def __init__(self, dry_run: bool = False, quiet: bool = False, file=None):
        self.dry_run, self.quiet = dry_run, quiet and not dry_run
        self.file = sys.stderr if file is None else file
        self.plan: WorkPlan | None = None
        self.done: dict[str, int] = {}
        self.step_s: dict[str, float] = {}
        self.estimate_s: float | None = None
        self._bar: tqdm | None = None
        self._start = self._since = time.perf_counter()

    def start(self, plan: WorkPlan) -> None:
        if self.plan is not None:
            return
        self.plan = plan
        self.done = {stage.name: 0 for stage in plan.stages}
        if not self.quiet:
            tqdm.write(plan.describe(), file=self.file)
        self._since = time.perf_counter()
        if self.dry_run and not any(stage.steps for stage in plan.stages):
            raise DryRunDone(plan, 0.0, "no step to compute")

    def restart_clock(self) -> None:
        """The next step is timed from now (what happened since the last step is not part of it)."""
        self._since = time.perf_counter()

    def step_done(self, name: str) -> None:
        """One step of stage `name` is done: time it if it is the stage's timed one, move its bar, estimate."""
        if self.plan is None:  # a run called outside any plan (a helper on its own): nothing to time or show
            return
        now = time.perf_counter()
        stage = self.plan.stage(name)
        self.done[name] += 1
        if self.done[name] == min(2, stage.steps):
            self.step_s[name] = now - self._since
            if self._all_timed():
                self._estimate(now)
        self._since = now
        if not self.quiet and not self.dry_run:
            if self._bar is None:
                total = sum(stage.steps for stage in self.plan.stages)
                self._bar = tqdm(total=total, unit="step", file=self.file, leave=False)
            self._bar.set_description(name, refresh=False)
            self._bar.update()

    def steps(self, name: str, iterable: Iterable) -> Iterator:
        """The items of `iterable`, each a step of stage `name` (timed from its yield to the next request);
        a dry run stops once the stage is timed."""
        for item in iterable:
            self.restart_clock()
            yield item
            self.step_done(name)
            if self.dry_run and name in self.step_s:
                return

    @contextmanager
    def step(self, name: str):
        """One step of stage `name`: the block's body."""
        self.restart_clock()
        yield
        self.step_done(name)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _all_timed(self) -> bool:
        return all(stage.name in self.step_s for stage in self.plan.stages if stage.steps > 0)

    def _rates(self) -> str:
        timed = [stage.name for stage in self.plan.stages if stage.name in self.step_s]
        return ", ".join(f"{name} {_short_seconds(self.step_s[name])} a step" for name in timed)

    def _estimate(self, now: float) -> None:
        left = sum(
            (stage.steps - self.done[stage.name]) * self.step_s[stage.name]
            for stage in self.plan.stages
            if stage.steps > 0
        )
        self.estimate_s = now - self._start + max(left, 0.0)
        if self.dry_run:
            raise DryRunDone(self.plan, self.estimate_s, self._rates())
        if not self.quiet:
            tqdm.write(
                f"estimated total time: about {format_seconds(self.estimate_s)} (an estimate from one timed step "
                f"of each stage: {self._rates()})",
                file=self.file,
            )


def as_planner(progress: bool | Planner) -> Planner:
    """The planner a run walks its steps with: the one given, else a new one (`progress` False: quiet)."""
    return progress if isinstance(progress, Planner) else Planner(quiet=not progress)
