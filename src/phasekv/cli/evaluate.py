"""`phasekv eval PROBE MODEL`: run a probe on a phasekv checkpoint or any HF causal LM directory, print a short
table, and optionally write the JSON results (`--out`). Every residue probe of `studies.probe.registry` (lookup,
needle, ...) gets its command from its declaration: its flags, their defaults (its options class's) and
its help line; the flip probe has its own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import typer

from phasekv.cli.errors import one_line_errors
from phasekv.cli.options import FieldGroup, OptionGroup, comma_list, expand_groups
from phasekv.cli.scoring import ENDPOINT, SCORING
from phasekv.studies.flags import Flag
from phasekv.studies.flip.options import FlipOptions
from phasekv.studies.probe import registry
from phasekv.studies.probe.registry import Probe

eval_app = typer.Typer(
    help=f"Run the phase probes ({', '.join(registry.names())}, flip) on a phasekv checkpoint or an HF causal LM "
    "directory.",
    no_args_is_help=True,
    add_completion=False,
)

FLIP = FlipOptions()  # the flip probe's defaults
MODEL = typer.Argument(None, help="phasekv checkpoint or HF model directory (with --endpoint: its tokenizer)")
OUT = typer.Option(None, "--out", help="write the results JSON here")
QUIET = typer.Option(False, "--quiet", help="no plan, progress bar or time estimate")
GRID_SHIFT = typer.Option(
    False,
    "--grid-shift",
    help="also score the prompts with the compression grid at every offset 0..S-1 (phasekv compressed models, "
    "pool: presses, kvpress presses with a chunk grid): "
    "a phase effect moves with the grid, a position effect does not (S times the scoring)",
)
MIN_EFFECT = typer.Option(
    5.0,
    "--min-effect",
    min=0.0,
    max=100.0,
    help="the phase amplitude (points) whose lower bound a 'phase-sensitive' verdict must clear; smaller "
    "replicated patterns read 'phase effect below N points'",
)
MAX_MDE = typer.Option(
    20.0,
    "--mde",
    min=0.1,
    max=100.0,
    help="the largest minimum detectable effect (points) that backs a null: a run that could miss a larger weak "
    "phase reads 'inconclusive: could miss a weak phase of up to N points', not 'no phase effect detected'",
)
DRY_RUN = typer.Option(
    False, "--dry-run", help="print the plan (prompts, forward passes, design) and exit: loads only the tokenizer"
)
DUMP = typer.Option(
    None,
    "--dump-prompts",
    help="write the prompts (token ids and decoded text) here as JSON lines (also with --dry-run)",
)
STRIDE = typer.Option(
    None,
    min=1,
    help="stride S of the period check and period of the verdict (default: the model's or the press's compression "
    "stride, else half the modulus; printed with its reason, --dry-run too)",
)


LIKE = typer.Option(
    None,
    "--like",
    help="measure like an earlier result: take the probe options of a profile run folder (runs/PROFILE/runs/NAME), "
    "a result JSON or an audit folder; flags given here override them (MODEL defaults to the model it scored)",
)
OUTPUT = OptionGroup(  # what a probe writes and prints besides its table
    out=(Path, OUT),
    quiet=(bool, QUIET),
    dry_run=(bool, DRY_RUN),
    dump_prompts=(Path, DUMP),
)


def _like(ctx: typer.Context, probe: str, like: Path | None, design: dict, model, stride, resamples):
    """(option fields, model, stride, resamples) of a residue probe's command: `design` maps each option field
    (also the command's parameter) to its value; with --like the recorded measurement fills every field whose
    flag was not given (`studies.probe.like.recorded`). Fields left None take the options' own defaults."""

    def explicit(parameter: str) -> bool:  # by name: typer may ship its own click, with its own enum
        return ctx.get_parameter_source(parameter).name not in ("DEFAULT", "DEFAULT_MAP")

    chosen = dict(design)
    if like is not None:
        from phasekv.studies.probe.like import recorded

        found = recorded(like, probe)
        chosen = {**found.options, **{name: value for name, value in design.items() if explicit(name)}}
        stride = stride if explicit("stride") else found.stride
        resamples = resamples if explicit("resamples") else found.n_resamples or resamples
        if model is None and found.model is not None:
            model = Path(found.model)
    return {k: v for k, v in chosen.items() if v is not None}, model, stride, resamples


def _scorer(model: Path | None, scoring: dict, remote: dict, question: Callable[[object], int] | None = None):
    """The probe's scorer; a press scorer learns how many prompt tokens are the uncompressed question
    (`question(tokenizer)`: the probe's query tail as its template compiles for the tokenizer)."""
    from phasekv.cli.scoring import scorer_from_options
    from phasekv.scoring.press_question import bind_question

    if remote["url"] is not None and scoring["press"] is not None:
        raise ValueError("--press compresses a local model's cache: it cannot apply to --endpoint")
    scorer = scorer_from_options(model, scoring, remote)
    return scorer if question is None else bind_question(scorer, question(scorer.tokenizer))


def _planning_tokenizer(model: Path | None, scoring: dict, remote: dict) -> tuple[object, int, bool]:
    """(tokenizer, batch size, scored by requests) for a dry run: no model is loaded and no
    request is sent (through an endpoint the batch size is the concurrency)."""
    from phasekv.scoring import ScorerError
    from phasekv.serve.local import load_tokenizer

    if remote["url"] is not None:
        directory = remote["tokenizer"] or model
        if directory is None:
            raise ScorerError("--endpoint needs --tokenizer DIR (or MODEL): the served model's tokenizer, locally")
        return load_tokenizer(directory), remote["concurrency"], True
    if model is None:
        raise ScorerError("give MODEL (a model directory) or --endpoint URL")
    return load_tokenizer(model), scoring["batch_size"], False


def _dump(rows, path: Path | None, tokenizer) -> None:
    if path is not None:
        from phasekv.results.record import dump_prompts

        typer.echo(f"wrote {dump_prompts(rows, path, tokenizer)} prompts to {path}")


def _dry_run(plan, rows, dump: Path | None, tokenizer) -> None:
    typer.echo(plan.describe())
    _dump(rows, dump, tokenizer)
    typer.echo(
        "dry run: nothing scored, no results written. No time estimate: it needs the model and a timed warm-up "
        "(a run prints it after its first batches)."
    )


def _planned_period(model: Path | None, scoring: dict, remote: dict, stride: int | None, modulus: int):
    """The period a run would test (`stats.stride.default_period`), read without loading the model: the press
    spec's grid, else the model's config; a served model's grid is known only once it answers."""
    from phasekv.stats.stride import MODEL_GRID, PRESS_GRID, default_period

    if remote["url"] is not None:
        return default_period(stride, None, modulus, known=False)
    if scoring["press"] is not None:
        from phasekv.scoring.press_spec import parse_press, press_stride

        return default_period(stride, press_stride(parse_press(scoring["press"]))[0], modulus, PRESS_GRID)
    from phasekv.serve.local import local_stride

    return default_period(stride, local_stride(model), modulus, MODEL_GRID)


def _built(tokenizer, probe: Probe, options):
    """The prompts a run of `probe` scores, with the run's prompt prefix."""
    from phasekv.results.record import prompt_prefix

    return probe.prompts(tokenizer, options, prompt_prefix(tokenizer)).prompts


def _prompt_set_scorer(
    model,
    scoring: dict,
    remote: dict,
    probe: Probe,
    options,
    output: dict,
    stride: int | None = None,
    min_effect: float = 5.0,
):
    """The scorer of a run of `probe`, after dumping its prompts when asked; None after a dry run, which prints
    the plan and the design's minimum detectable effect and loads only the tokenizer."""
    from phasekv.stats.format import format_mde
    from phasekv.studies.probe.scored import plan_prompt_set
    from phasekv.studies.probe.units import planned_mde

    dump = output["dump_prompts"]
    if output["dry_run"]:
        tokenizer, batch_size, requests = _planning_tokenizer(model, scoring, remote)
        prompts = _built(tokenizer, probe, options)
        period = _planned_period(model, scoring, remote, stride, options.modulus)
        _, mde, note = planned_mde(
            prompts, stride, options.modulus, probe.chance(options), min_effect=min_effect, period=period.value
        )
        typer.echo(f"{period.reason}; phase verdict: {format_mde(mde)}, {note}")
        _dry_run(plan_prompt_set(prompts, batch_size, requests), _prompt_rows(prompts), dump, tokenizer)
        return None
    scorer = _scorer(model, scoring, remote, lambda tok: probe.question(tok, options))
    if dump is not None:
        _dump(_prompt_rows(_built(scorer.tokenizer, probe, options)), dump, scorer.tokenizer)
    return scorer


def _prompt_rows(prompts):
    """The dump's rows of a residue probe's prompts, built one at a time."""
    from dataclasses import asdict

    return (asdict(p) for p in prompts)


def _check_outputs(output: dict, like: Path | None = None) -> None:
    """A bad --out or --dump-prompts path fails now, not after the whole run; so does one that would overwrite
    the --like result read, or the other output."""
    from phasekv.files import check_not_input, check_output

    inputs = [] if like is None else [like]
    if output["out"] is not None:
        check_output(output["out"])
        check_not_input(output["out"], inputs)
    if output["dump_prompts"] is not None:
        check_output(output["dump_prompts"], option="--dump-prompts")
        check_not_input(output["dump_prompts"], inputs, option="--dump-prompts")
        if output["out"] is not None and Path(output["out"]).resolve() == Path(output["dump_prompts"]).resolve():
            raise ValueError(f"--out and --dump-prompts both name {output['out']}: give each its own file")


def _check_grid_shift(grid_shift: bool, press: str | None) -> None:
    """--grid-shift with a press whose grid moves per prompt (a dithered press) fails now, before the model loads."""
    if grid_shift and press is not None:
        from phasekv.scoring.press_spec import grid_shift_refusal, parse_press

        if refusal := grid_shift_refusal(parse_press(press)):
            raise ValueError(refusal)


def _press_line(press: dict) -> str | None:
    """What a kvpress press kept, and how often its cut fell inside a tie (then top-k's tie order chose)."""
    kept = press.get("kv_entries", {}).get("kept_fraction")
    if kept is None:
        return None
    line = f"press: {kept:.2f} of the context's KV entries kept per layer and head"
    ties = press.get("ties_at_cut", {})
    if ties.get("checked"):
        line += f"; {100 * ties['fraction']:.0f}% of its selections cut inside a run of equal scores" + (
            " (there top-k's tie order, not the press's scores, chose what to keep)" if ties["fraction"] else ""
        )
    return line


def _finish(result: dict, table: str, out: Path | None) -> None:
    typer.echo(table)
    if (line := _press_line(result["model"].get("press") or {})) is not None:
        typer.echo(line)
    answers = result["model"].get("answers")  # an endpoint audit's
    if answers is not None:
        typer.echo(f"answers: {answers['from_cache']} from the results cache, {answers['sent']} sent")
    kept = result.get("scoring", {}).get("answers")  # a local model's answer cache
    if kept is not None:
        typer.echo(f"answers: {kept['from_cache']} from the answer cache ({kept['cache']}), {kept['scored']} scored")
    if out is not None:
        from phasekv.results.record import write_results

        typer.echo(f"wrote {write_results(result, out)}")
        if result["probe"] in registry.names():
            from phasekv.studies.probe.like import eval_command

            typer.echo(f"re-measure: {eval_command(result['model'], result['probe'], out)}")


def _controls_line(result: dict) -> str:
    c = result["controls"]
    held = all(v for k, v in c.items() if k != "query_positions")
    state = "held" if held else "FAILED: " + ", ".join(k for k, v in c.items() if v is False)
    return f"position controls {state} (query position {c['query_positions']}, equal mean and variance of t_K)"


def _stride_statement(result: dict) -> str:
    """The stride of the period check and its source, or, where there is none, why, and the period the phase
    verdict tests instead: said once, so that a missing stride never reads as a verdict without a period."""
    stride = result["stride"]
    reason = (result.get("period") or {}).get("reason")
    said = "" if reason is None else f"{reason}; "
    if stride["value"] is not None:
        return f"{said}stride for the period check: {stride['value']} ({stride['source']})"
    if reason is not None:  # the period's reason already says why there is no period check
        return reason
    period = (result.get("phase_test") or {}).get("period")
    tested = "" if period is None else f"; the phase verdict tests period {period}"
    return f"no period check across residues ({stride['source']}){tested}"


def _summary_table(result: dict, heading: str) -> str:
    from phasekv.stats import ResidueSummary, UniformityTest, format_summary

    fields = dict(result["summary"])
    fields["uniformity"] = UniformityTest(**fields["uniformity"])
    lines = [
        heading,
        f"{_stride_statement(result)}; wall time {result['wall_time_s']:.1f} s",
        format_summary(ResidueSummary(**fields)),
        _controls_line(result),
    ]
    if "phase_test" in result:
        from phasekv.stats import format_verdict

        lines.append(format_verdict(result["phase_test"]))
    return "\n".join(lines)


def design_options(probe: Probe) -> FieldGroup:
    """The options of `probe`'s command that set its option fields (`Probe.flags`), each defaulting to the field's
    default in its options class."""
    return FieldGroup(probe.options(), probe.flags)


def probe_command(probe: Probe):
    """The command of a residue probe: its design options (`design_options`), then the options every residue
    probe shares. The run's library loads when the command runs, so that --help loads no torch."""
    group = design_options(probe)

    def command(
        ctx: typer.Context,
        model: Path = MODEL,
        design: dict = group,
        stride: int = STRIDE,
        resamples: int = typer.Option(2000, min=1, help="bootstrap resamples and permutations"),
        like: Path = LIKE,
        scoring: dict = SCORING,
        remote: dict = ENDPOINT,
        output: dict = OUTPUT,
        grid_shift: bool = GRID_SHIFT,
        min_effect: float = MIN_EFFECT,
        max_mde: float = MAX_MDE,
    ) -> None:
        with one_line_errors("eval"):
            from phasekv.studies.probe.run import run_probe

            _check_outputs(output, like)
            _check_grid_shift(grid_shift, scoring["press"])
            fields, model, stride, resamples = _like(ctx, probe.name, like, design, model, stride, resamples)
            options = probe.options(**fields)
            scorer = _prompt_set_scorer(model, scoring, remote, probe, options, output, stride, min_effect)
            if scorer is None:
                return
            run_options = dict(
                stride=stride, n_resamples=resamples, grid_shift=grid_shift, min_effect=min_effect, max_mde=max_mde
            )
            result = run_probe(probe.name, scorer, options, progress=not output["quiet"], **run_options)
            heading = probe.heading(result, options, remote["url"] or model)
            _finish(result, _summary_table(result, heading), output["out"])

    command.__doc__ = probe.summary
    return expand_groups(command)


for _probe in registry.probes().values():
    eval_app.command(_probe.name)(probe_command(_probe))


def _read_context(value: str | None) -> str | None:
    """A literal context, or the contents of a file given as @path."""
    if value is None or not value.startswith("@"):
        return value
    path = Path(value[1:])
    if not path.is_file():
        raise FileNotFoundError(f"context file {path} does not exist")
    return path.read_text()


FLIP_DESIGN = FieldGroup(  # the `FlipOptions` fields `phasekv eval flip` sets
    FLIP,
    dict(
        context=(
            str,
            typer.Option(None, help="the fixed context (a string, or @file); default: an FP8-kernel line"),
        ),
        candidates=(str, typer.Option(",".join(FLIP.candidates), help="comma-separated candidate continuations")),
        min_length=Flag("shortest filler length in tokens", min=0),
        n_lengths=Flag("number of filler lengths (one token apart)", "--lengths", 1),
        families=(str, typer.Option(FLIP.families, help="comma-separated filler families (default: all)")),
        period=Flag("period P of the pattern (default: the model's stride, else 4)", min=1),
        n_permutations=Flag("shuffles for the pattern's chance level", "--permutations", 1),
        template=Flag("paper (context right after the filler) or natural (context on a new line: re-encodable text)"),
        seed=Flag("seed of the permutation test"),
    ),
    # candidates are not stripped: a continuation may begin with a space
    parsers=dict(
        context=_read_context, candidates=lambda text: tuple(c for c in text.split(",") if c), families=comma_list
    ),
)


@eval_app.command()
@expand_groups
def flip(
    model: Path = MODEL,
    design: dict = FLIP_DESIGN,
    scoring: dict = SCORING,
    remote: dict = ENDPOINT,
    output: dict = OUTPUT,
) -> None:
    """Flipping completion: candidate probabilities as the filler grows one token at a time."""
    from phasekv.scoring.press_question import FLIP_QUESTION_TOKENS
    from phasekv.studies.flip.result import FlipResult
    from phasekv.studies.flip.run import flip_prompts, plan_flip, run_flip

    with one_line_errors("eval"):
        _check_outputs(output)
        options = FLIP_DESIGN.build(design)
        dump = output["dump_prompts"]
        if output["dry_run"]:
            tokenizer, batch_size, requests = _planning_tokenizer(model, scoring, remote)
            built = flip_prompts(tokenizer, options)
            _dry_run(plan_flip(built, batch_size, requests), built.rows(), dump, tokenizer)
            return
        scorer = _scorer(model, scoring, remote, lambda tok: FLIP_QUESTION_TOKENS)
        if dump is not None:
            _dump(flip_prompts(scorer.tokenizer, options).rows(), dump, scorer.tokenizer)
        result = run_flip(scorer, options, progress=not output["quiet"])
        _finish(result, FlipResult.from_dict(result).summary, output["out"])
