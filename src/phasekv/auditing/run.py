"""The audit end to end: screen the lookup templates, size the design from a budget or a target minimum
detectable effect, run the lookup (then the needle when there is time, or the residue probes asked for), write the
results and the report.

The screen scores a few prompts of every template on mappings of the calibration split, which the run (the eval
split) never draws, after one untimed warm-up prompt; the template the model answers best is used. Its time per
distinct prompt, scaled by sequence length, prices every candidate design (`studies.probe.scored.plan_prompt_set`
counts the distinct prompts a design forwards); the planned MDE (`studies.probe.units.planned_mde`) is simulated at
the screen's accuracy. A budget counts the whole audit from `started` (model loading included): the design is
the largest whose scoring, statistics and report fit in what the screen left (with a target MDE too, the
smallest of those that reaches it). The target, else `stats.verdict.MAX_MDE_POINTS`, is the bound of the
verdict: when the budget buys no design that plans to reach it, the audit stops before scoring, saying what
the budget buys and about what budget would reach it, unless told to score it anyway.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from phasekv.results.record import prompt_prefix, write_results
from phasekv.scoring import Scorer
from phasekv.scoring.press_question import bind_question
from phasekv.stats.format import format_mde
from phasekv.studies.audit.options import SCHEMA, SCREENED_PROBE, AuditOptions
from phasekv.studies.audit.result import AuditedProbe, AuditResult, PlannedProbe, ScreenedTemplate, plan_line
from phasekv.studies.probe import registry
from phasekv.studies.probe.like import eval_command
from phasekv.studies.probe.plan import format_seconds, scores_by_request
from phasekv.studies.probe.registry import Probe
from phasekv.studies.probe.result import ProbeResult
from phasekv.studies.probe.run import run_probe
from phasekv.studies.probe.scored import plan_prompt_set, score_prompt_set
from phasekv.studies.probe.units import planned_mde, scorer_period

SCREEN_SPLIT = "calibration"
SCREEN_MAPPINGS = 2
SCREEN_SHARE = 0.2  # of the budget: once the screen has taken this much, the templates left are not screened
REPORT_RESERVE_S = 20.0  # the result files and the report (HTML and PNGs) after the probes
STATS_FACTOR = 3.0  # a run's statistics (bootstrap, permutations, its own MDE) against one planned MDE's time
NARROWER_SPREADS = (4, 2)
DEFAULT_MODULUS = 8  # models without a compression stride: the period check runs at modulus // 2


class AuditError(ValueError):
    """An audit that cannot be run as asked (no usable template, no design within the budget or the MDE)."""


def default_modulus(stride: int | None) -> int:
    """Two periods of the model's compression stride, else `DEFAULT_MODULUS`."""
    return 2 * stride if stride else DEFAULT_MODULUS


def probe_design(probe: Probe, options: AuditOptions, template: str, modulus: int, n: int, split: str = "eval"):
    """`probe`'s design in this audit at `n` units of `split`: the probe's own choices (`Probe.audit_design`) with
    the audit's residues, spread and seed."""
    own = probe.audit_design(options, template)
    units = {f"n_{probe.unit}s": n}
    return replace(own, modulus=modulus, spread_blocks=options.spread_blocks, seed=options.seed, split=split, **units)


def lookup_design(options: AuditOptions, template: str, modulus: int, n_mappings: int, split: str = "eval"):
    """The screened probe's design at `n_mappings` in `split` (the screen draws the calibration split)."""
    return probe_design(registry.get(SCREENED_PROBE), options, template, modulus, n_mappings, split)


class Clock:
    """Seconds since `started` and what is left of the budget (None: no budget)."""

    def __init__(self, started: float, budget: float | None):
        self.started, self.budget = started, budget

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def left(self) -> float:
        return float("inf") if self.budget is None else self.budget - self.elapsed()


def _spaced(n: int, k: int) -> list[int]:
    """k indices spread evenly over range(n) (all of them when k >= n)."""
    return list(range(n)) if k >= n else sorted({int(i) for i in np.linspace(0, n - 1, k)})


def screen_templates(scorer: Scorer, options: AuditOptions, modulus: int, clock: Clock) -> list[ScreenedTemplate]:
    """Score `options.screen_prompts` calibration-split lookup prompts of every template; a template that does not
    compile for the tokenizer is kept with its error, and once the screen has taken `SCREEN_SHARE` of the budget
    the templates left are not screened (said so in their rows)."""
    prefix = prompt_prefix(scorer.tokenizer)
    rows, warm, start_screen = [], False, clock.elapsed()
    for template in options.templates:
        spent = clock.elapsed() - start_screen
        screened = any(r.usable for r in rows)
        if clock.budget is not None and screened and spent > SCREEN_SHARE * clock.budget:
            rows.append(
                ScreenedTemplate(
                    template=template,
                    error=f"not screened: the screen took {spent:.0f} s, over {SCREEN_SHARE:.0%} of the budget",
                )
            )
            continue
        lookup = registry.get(SCREENED_PROBE)
        design = lookup_design(options, template, modulus, SCREEN_MAPPINGS, split=SCREEN_SPLIT)
        try:
            prompt_set = lookup.prompts(scorer.tokenizer, design, prefix)
        except ValueError as err:
            rows.append(ScreenedTemplate(template=template, error=str(err)))
            continue
        prompts = [prompt_set.prompts[i] for i in _spaced(len(prompt_set.prompts), options.screen_prompts)]
        key_length = prompt_set.options["answer_offset"]
        bind_question(scorer, lookup.question(scorer.tokenizer, design))
        if not warm:  # the first forward carries one-off costs that would inflate every estimate
            score_prompt_set(scorer, prompts[:1], key_length, "warm-up", progress=False)
            warm = True
        start = time.perf_counter()
        scores = score_prompt_set(scorer, prompts, key_length, "screen", progress=False)
        seconds = time.perf_counter() - start
        distinct = len(set(scores.prompt_id.tolist()))
        rows.append(
            ScreenedTemplate(
                template=template,
                accuracy=float(scores.correct.mean()),
                prompts=len(prompts),
                distinct_prompts=distinct,
                seconds=round(seconds, 3),
                seconds_per_prompt=round(seconds / distinct, 4),
                longest=max(len(p.input_ids) + len(p.answer_ids) - 1 for p in prompts),
            )
        )
    return rows


def best_template(screen: list[ScreenedTemplate]) -> ScreenedTemplate:
    """The usable template with the highest screen accuracy (the first listed among equals)."""
    usable = [s for s in screen if s.usable]
    if not usable:
        raise AuditError(
            "no lookup template compiles for this tokenizer: " + "; ".join(f"{s.template}: {s.error}" for s in screen)
        )
    return max(usable, key=lambda s: s.accuracy)  # max keeps the first of equal keys


@dataclass(frozen=True)
class Candidate:
    """One design priced before scoring."""

    probe: Probe
    options: object
    prompts: list
    n_prompts: int
    distinct: int
    scoring_s: float


def price_design(scorer, build, options, rate: ScreenedTemplate) -> Candidate:
    """`options` (prompts: `build`, a `Probe.prompts`) priced at the screen's time per distinct prompt (`rate`),
    scaled by the longest sequence."""
    prompts = build(scorer.tokenizer, options, prompt_prefix(scorer.tokenizer)).prompts
    plan = plan_prompt_set(prompts, scorer.batch_size, scores_by_request(scorer))
    scoring = plan.n_rows * rate.seconds_per_prompt * max(1.0, plan.longest / rate.longest)
    return Candidate(registry.probe_of(options), options, prompts, plan.n_prompts, plan.n_rows, scoring)


def _simulated(candidate: Candidate, period: int | None, accuracy: float) -> tuple[dict | None, float]:
    """(the planned MDE of `candidate` at `period` and a flat `accuracy`, the seconds its simulation took)."""
    o = candidate.options
    start = time.perf_counter()
    _, mde, _ = planned_mde(candidate.prompts, None, o.modulus, candidate.probe.chance(o), accuracy, period=period)
    return mde, time.perf_counter() - start


def _plan(candidate: Candidate, mde: dict | None, stats_s: float) -> PlannedProbe:
    """The plan of `candidate`: its counts, planned MDE and ETA (the scoring and `stats_s` of statistics)."""
    return PlannedProbe(
        probe=candidate.probe.name,
        options=asdict(candidate.options),
        prompts=candidate.n_prompts,
        distinct_prompts=candidate.distinct,
        eta_s=round(candidate.scoring_s + stats_s, 1),
        planned_mde=mde,
    )


def _reaches(mde: dict | None, points: float) -> bool:
    return mde is not None and mde["points"] is not None and mde["points"] <= points


def size_design(
    scorer, build, design: Callable[[int], object], counts, options: AuditOptions, rate, period, accuracy, left
) -> tuple[PlannedProbe, Candidate] | str:
    """The design of one probe (`design(n)`: its options at n units, `build` its prompts), or a string that says
    why none is possible.

    A target MDE alone: the smallest of `counts` whose planned MDE reaches it. A budget: the most units, up to
    `counts[-1]`, whose ETA fits in the seconds `left()` says are left; between two of `counts` the count is
    bisected, so that the design spends the budget rather than stop at the last of a coarse grid that fits
    (each unit adds a fixed share of prompts). With a target MDE too, the smallest of `counts` up to that design
    that reaches it: a design that already reaches the target does not burn the rest of the budget.

    A run's statistics (bootstrap, permutations, its own MDE) are priced at `STATS_FACTOR` times a planned MDE's
    simulation, which is timed once on the smallest design and grows with the distinct prompts; the chosen
    design's own planned MDE is simulated before the run, so it is paid for too."""

    def price(count: int) -> Candidate:
        return price_design(scorer, build, design(count), rate)

    if options.budget is None:
        found = None
        for count in counts:
            candidate = price(count)
            mde, seconds = _simulated(candidate, period, accuracy)
            found = None if mde is None else mde["points"]
            if _reaches(mde, options.mde_points):
                return _plan(candidate, mde, STATS_FACTOR * seconds), candidate
        return (
            f"no design up to {counts[-1]} units reaches an MDE of {options.mde_points:g} points at the screen's "
            f"accuracy of {100 * accuracy:.0f}% (the largest: {'none' if found is None else found}); give a larger "
            "--mde or a --budget"
        )
    smallest = price(counts[0])
    smallest_mde, seconds = _simulated(smallest, period, accuracy)
    per_prompt = seconds / smallest.distinct

    def stats(c: Candidate) -> float:
        return STATS_FACTOR * per_prompt * c.distinct

    def fits(c: Candidate) -> bool:
        return c.scoring_s + stats(c) + per_prompt * c.distinct <= left()

    if not fits(smallest):
        return (
            f"the smallest design ({counts[0]} units, {smallest.distinct} distinct prompts) needs about "
            f"{format_seconds(smallest.scoring_s + stats(smallest))} and the budget leaves "
            f"{format_seconds(max(0.0, left()))}"
        )
    chosen, fitting, over = smallest, counts[0], None
    for count in counts[1:]:
        candidate = price(count)
        if not fits(candidate):
            over = count
            break
        chosen, fitting = candidate, count
    while over is not None and over - fitting > 1:  # the count between two grid points that fills the budget
        middle = (fitting + over) // 2
        candidate = price(middle)
        if fits(candidate):
            chosen, fitting = candidate, middle
        else:
            over = middle
    mde = smallest_mde if chosen is smallest else _simulated(chosen, period, accuracy)[0]
    if options.mde_points is not None and _reaches(mde, options.mde_points):
        for count in (c for c in counts if c < fitting):  # no smaller design reaches what the largest does not
            candidate = price(count)
            smaller = smallest_mde if count == counts[0] else _simulated(candidate, period, accuracy)[0]
            if _reaches(smaller, options.mde_points):
                chosen, mde = candidate, smaller
                break
    return _plan(chosen, mde, stats(chosen)), chosen


def short_of_bound(plan: PlannedProbe, bound: float, spent: float) -> str:
    """Why the budget buys no design that reaches `bound`: the best planned MDE it buys and, where that MDE is
    finite, about what budget would reach the bound (an MDE shrinks as one over the root of the units, and
    the ETA grows with them; `spent`: the seconds the audit had taken when it was planned)."""
    mde = plan.planned_mde
    units = registry.get(plan.probe).units(plan.options)
    best = "no testable design" if mde is None else f"at best a planned {format_mde(mde)}"
    head = f"no {plan.probe} design within the budget reaches an MDE of {bound:g} points: it buys {best}"
    if mde is None or mde["points"] is None:
        return f"{head}; the budget that would reach it cannot be estimated from this design"
    needed = int(np.ceil(units * (mde["points"] / bound) ** 2))
    budget = spent + REPORT_RESERVE_S + plan.eta_s * needed / units
    return f"{head}; about {format_seconds(budget)} ({needed} units) would reach it"


def spreads(options: AuditOptions) -> list[int]:
    """The spreads of target positions a design may use: the one asked for and, with a budget, the narrower
    `NARROWER_SPREADS` (fewer distinct prompts, a larger MDE) when no design at it fits."""
    if options.goal == "mde":
        return [options.spread_blocks]
    return [options.spread_blocks, *(s for s in NARROWER_SPREADS if s < options.spread_blocks)]


def run_audit(
    scorer: Scorer,
    options: AuditOptions,
    out: str | Path,
    *,
    started: float | None = None,
    model_args: str | None = None,
    echo: Callable[[str], object] = print,
    progress: bool = True,
) -> AuditResult:
    """Screen, plan (printed through `echo` before any probe is scored), run, write `out`/lookup.json (and
    PROBE.json of every later probe run), audit.json and report.html; returns the typed result. `started`
    (time.perf_counter) is when the budget began (default: now); `model_args` how an eval command names the model
    (default: from the scorer's record)."""
    from phasekv.report import build_report

    clock = Clock(time.perf_counter() if started is None else started, options.budget)
    if clock.left() <= REPORT_RESERVE_S:
        raise AuditError(
            f"a budget of {format_seconds(options.budget)} leaves {format_seconds(max(0.0, clock.left()))}, not even "
            f"the {REPORT_RESERVE_S:.0f} s the results and the report take; nothing was scored"
        )
    out = Path(out)
    modulus = options.modulus or default_modulus(scorer.compression_stride)
    period = scorer_period(scorer, options.stride, modulus)
    echo(period.reason)
    screen = screen_templates(scorer, options, modulus, clock)
    chosen = best_template(screen)
    echo(f"screen: {' · '.join(s.brief() for s in screen)} -> {chosen.template}")
    tried = spreads(options)
    for spread in tried:  # with a budget, a narrower span of positions before giving up
        options = replace(options, spread_blocks=spread)
        sized = size_design(
            scorer,
            registry.get(SCREENED_PROBE).prompts,
            lambda n, o=options: lookup_design(o, chosen.template, modulus, n),
            options.mappings,
            options,
            chosen,
            period.value,
            chosen.accuracy,
            lambda: clock.left() - REPORT_RESERVE_S,
        )
        if not isinstance(sized, str):
            break
    if isinstance(sized, str):
        raise AuditError(
            f"{SCREENED_PROBE}: {sized} (spread blocks {', '.join(map(str, tried))} tried); nothing was scored "
            "beyond the template screen"
        )
    if not _reaches(sized[0].planned_mde, options.max_mde):
        short = short_of_bound(sized[0], options.max_mde, clock.elapsed())
        if not options.anyway:
            raise AuditError(
                f"{short}; nothing was scored beyond the template screen (--anyway scores this design all the "
                "same: its null would read inconclusive)"
            )
        echo(f"warning: {short}; scoring it anyway (--anyway): a null will read inconclusive")
    plans, runs = [sized[0]], [sized[1]]
    later, not_run = options.later_probes()
    for name in later:
        probe = registry.get(name)
        planned = sum(plan.eta_s for plan in plans if plan.eta_s is not None)
        later_sized = size_design(
            scorer,
            probe.prompts,
            lambda n, p=probe: probe_design(p, options, chosen.template, modulus, n),
            getattr(options, f"{probe.unit}s"),
            options,
            chosen,
            period.value,
            chosen.accuracy,
            lambda p=planned: clock.left() - REPORT_RESERVE_S - p,
        )
        if isinstance(later_sized, str):
            plans.append(PlannedProbe(probe=name, skipped=later_sized))
        else:
            plans.append(later_sized[0])
            runs.append(later_sized[1])
    plans += [PlannedProbe(probe=name, skipped=why) for name, why in not_run.items()]
    for plan in plans:
        echo(plan_line(plan))
    probes = {}
    for candidate in runs:
        probe = candidate.probe
        bind_question(scorer, probe.question(scorer.tokenizer, candidate.options))
        result = run_probe(
            probe.name,
            scorer,
            candidate.options,
            stride=options.stride,
            n_resamples=options.n_resamples,
            progress=progress,
            max_mde=options.max_mde,
        )
        path = write_results(result, out / f"{probe.name}.json")
        typed = ProbeResult.from_dict(result, str(path))
        probes[probe.name] = AuditedProbe(
            file=path.name,
            verdict=typed.verdict,
            text=typed.summary,
            command=eval_command(result["model"], probe.name, path, model_args),
        )
    audit = AuditResult.from_dict(
        {
            "schema": SCHEMA,
            "model": scorer.describe(),
            "options": asdict(replace(options, budget_s=options.budget)),
            "out": str(out),
            "screen": [s.model_dump() for s in screen],
            "template": chosen.template,
            "period": period.to_dict(),
            "screen_split": SCREEN_SPLIT,
            "plan": [p.model_dump() for p in plans],
            "probes": {k: v.model_dump() for k, v in probes.items()},
            "budget_s": options.budget,
            "wall_time_s": 0.0,
            "report": "report.html",
        }
    )
    audit.write(out / "audit.json")  # first, so that the report opens on the audit: its model, plan and commands
    build_report(out, out / "report.html", pngs=False)  # the page only: PNGs cost a budget more than they add
    audit = audit.model_copy(update={"wall_time_s": round(clock.elapsed(), 1)})
    audit.write(out / "audit.json")
    return audit
