"""`phasekv knockout | gates | cycle`: the mechanistic analyses as commands (typer).

Each prints its plan and an estimate of its time before the long work (`--dry-run`: only those),
then a table, writes the result JSON and a PNG into `--out` (a directory, `analysis` by default),
and turns bad input into one line with exit code 2.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import typer

from phasekv.cli.errors import one_line_errors
from phasekv.cli.options import FieldGroup, OptionGroup, expand_groups, template
from phasekv.cli.planned import DRY_RUN, run_planned
from phasekv.cli.scoring import LOADING, study_loading
from phasekv.files import check_output
from phasekv.internals.design import ANALYSIS_LOOKUP
from phasekv.studies.cycle.options import CycleOptions, format_deltas, parse_deltas
from phasekv.studies.flags import Flag
from phasekv.studies.gates.options import GatesOptions
from phasekv.studies.knockout.options import KnockoutOptions
from phasekv.studies.probe import registry

KNOCKOUT, GATES, CYCLE = KnockoutOptions(), GatesOptions(), CycleOptions()  # the analyses' defaults
MODEL = typer.Argument(..., help="phasekv checkpoint directory or Hugging Face model directory")
OUT = typer.Option(Path("analysis"), "--out", help="directory for the JSON and PNG")
LOOKUP_FLAGS = registry.get("lookup").flags  # the analyses read the lookup probe, spelled as `eval lookup` spells it
PROMPTS = FieldGroup(  # the lookup prompts' fields the commands set, at the analyses' design
    ANALYSIS_LOOKUP,
    {
        name: LOOKUP_FLAGS[name]
        for name in ("n_records", "n_demos", "n_mappings", "placements_per_mapping", "modulus", "protocol", "seed")
    }
    | {"template": (str, template(ANALYSIS_LOOKUP.template))},
)
HELD_OUT_PROMPTS = FieldGroup(  # the lookup prompts, optionally of the pairs training held out
    ANALYSIS_LOOKUP, {**PROMPTS, "held_out_seed": LOOKUP_FLAGS["held_out_seed"]}
)
KNOCKOUT_DESIGN = FieldGroup(  # the `KnockoutOptions` fields `phasekv knockout` sets (its batch size: LOADING's)
    KNOCKOUT,
    dict(
        mode=(
            bool,
            typer.Option(
                KNOCKOUT.mode == "layers", "--layers", help="knock out whole layers' attention output (any HF model)"
            ),
        ),
        n_query=Flag("--layers: final positions replaced", "--query-tokens", 1),
        calibration_mappings=Flag("calibration-split mappings", "--calibration-mappings", 1),
        stride=Flag("fold mod this (default: the model's stride, else modulus // 2)", "--stride", 1),
    ),
    parsers=dict(mode=lambda layers: "layers" if layers else "heads"),
)
CYCLE_DESIGN = FieldGroup(  # the `CycleOptions` fields `phasekv cycle` sets
    CYCLE,
    dict(
        deltas=(
            str,
            typer.Option(format_deltas(CYCLE.deltas), "--delta", help="deltas: a range -3..3, a list 1,2,-1, or both"),
        ),
        n_resamples=Flag("bootstrap resamples over mappings", "--resamples", 10),
    ),
    parsers=dict(deltas=lambda text: tuple(parse_deltas(text))),
)
OUTPUT = OptionGroup(  # where an analysis writes and what it prints on the way
    out=(Path, typer.Option(Path("analysis"), "--out", help="directory for the JSON and PNG")),
    quiet=(bool, typer.Option(False, "--quiet", help="no plan, progress bar or time estimate")),
    dry_run=(bool, DRY_RUN),
)


def _check_out(output: dict, model: Path, *names: str) -> None:
    """A bad --out fails now, not after the analysis; so does one where NAME.json or NAME.png would replace a file
    the analysis reads (--out MODEL is allowed where no name is taken)."""
    from phasekv.files import check_not_input, folder_inputs

    check_output(output["out"], directory=True)
    inputs = folder_inputs(model)
    for name in names:
        for suffix in (".json", ".png"):
            check_not_input(output["out"] / f"{name}{suffix}", inputs)


def _run(name: str, work, output: dict, text, plot) -> None:
    """Run `work(planner)` under its plan (`--dry-run`: the plan only), print `text(result)` and write the
    result as NAME.json and its figure `plot(result, path)` as NAME.png into --out."""
    from phasekv.results.record import write_results

    result = run_planned(work, output["dry_run"], output["quiet"])
    if result is None:
        return
    typer.echo(text(result))
    out = output["out"]
    json_path = write_results(result, out / f"{name}.json")
    typer.echo(f"wrote {json_path} and {plot(result, out / f'{name}.png')}")


def _scorer(model: Path, scoring: dict):
    from phasekv.scoring import load_scorer

    return load_scorer(model, **scoring)


@expand_groups
def knockout_command(
    model: Path = MODEL,
    design: dict = KNOCKOUT_DESIGN,
    prompts: dict = HELD_OUT_PROMPTS,
    scoring: dict = study_loading(KNOCKOUT),
    output: dict = OUTPUT,
) -> None:
    """Knockout map: accuracy change per KV head (or whole layer) and residue, calibration-mean replacement."""
    from phasekv.studies.knockout.figure import plot_knockout
    from phasekv.studies.knockout.result import KnockoutResult
    from phasekv.studies.knockout.run import run_knockout

    with one_line_errors("knockout"):
        _check_out(output, model, "knockout")
        lookup = replace(ANALYSIS_LOOKUP, **prompts)
        options = replace(KNOCKOUT_DESIGN.build(design), batch_size=scoring["batch_size"])
        scorer = _scorer(model, scoring)
        _run(
            "knockout",
            lambda planner: run_knockout(scorer, lookup, options, planner),
            output,
            lambda result: KnockoutResult.from_dict(result).summary,
            plot_knockout,
        )


@expand_groups
def gates_command(
    model: Path = typer.Argument(..., help="checkpoint / HF DeepseekV4 directory, or a training run directory"),
    source: str = typer.Option("auto", "--source", help="run dirs: auto, checkpoints or snapshots"),
    prompts: dict = PROMPTS,
    scoring: dict = study_loading(GATES),
    output: dict = OUTPUT,
) -> None:
    """Gate concentration (static and per-window effective numbers, phase shares); trajectories for a run dir."""
    from phasekv.internals.topk import format_topk_hits
    from phasekv.studies.gates.figure import plot_gate_trajectory, plot_gates
    from phasekv.studies.gates.run import SOURCES, format_gates, is_run_dir, run_gate_trajectory, run_gates

    def trajectory_text(trajectory: dict) -> str:
        last = trajectory["steps"][-1]
        return (
            f"gate trajectory of {model}: {len(trajectory['steps'])} steps ({trajectory['source']})\n"
            f"step {last['step']}:\n{format_gates(last['rows'])}"
        )

    def gates_text(result: dict) -> str:
        lines = [f"gates of {model} over the windows of {result['n_windows_from']['prompts']} prompts"]
        lines.append(format_gates(result["rows"]))
        if "topk_hits" in result:
            lines.append(format_topk_hits(result["topk_hits"]))
        return "\n".join(lines)

    with one_line_errors("gates"):
        _check_out(output, model, "gates", "gate_trajectory")
        lookup = replace(ANALYSIS_LOOKUP, **prompts)
        if source not in SOURCES:  # checked for a checkpoint too, where it has no use, so a typo never passes
            raise ValueError(f"unknown --source {source!r}; choose one of {', '.join(SOURCES)}")
        if is_run_dir(model):
            _run(
                "gate_trajectory",
                lambda planner: run_gate_trajectory(model, lookup, scoring["batch_size"], source, planner),
                output,
                trajectory_text,
                plot_gate_trajectory,
            )
            return
        if source != "auto":
            raise ValueError(f"--source {source} applies to a training run directory; {model} is a checkpoint")
        scorer = _scorer(model, scoring)
        _run(
            "gates",
            lambda planner: run_gates(scorer, lookup, scoring["batch_size"], planner),
            output,
            gates_text,
            lambda result, path: plot_gates(result["rows"], path),
        )


@expand_groups
def cycle_command(
    model: Path = MODEL,
    design: dict = CYCLE_DESIGN,
    prompts: dict = HELD_OUT_PROMPTS,
    scoring: dict = LOADING,
    output: dict = OUTPUT,
) -> None:
    """Gate cycling (W = S models): observed vs predicted accuracy change by phase, R^2 grid over deltas."""
    from phasekv.studies.cycle.figure import plot_cycle
    from phasekv.studies.cycle.run import format_cycle, run_cycle

    with one_line_errors("cycle"):
        _check_out(output, model, "cycle")
        options = CYCLE_DESIGN.build(design)
        lookup = replace(ANALYSIS_LOOKUP, **prompts)
        scorer = _scorer(model, scoring)
        _run(
            "cycle",
            lambda planner: run_cycle(scorer, list(options.deltas), lookup, options.n_resamples, planner),
            output,
            format_cycle,
            plot_cycle,
        )
