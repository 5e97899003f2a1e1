"""`phasekv knockout | gates | cycle`: the mechanistic analyses as commands (typer).

Each prints its plan and an estimate of its time before the long work (`--dry-run`: only those),
then a table, writes the result JSON and a PNG into `--out` (a directory, `analysis` by default),
and turns bad input into one line with exit code 2.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import typer

from phasekv.analysis.design import ANALYSIS_LOOKUP
from phasekv.cli.errors import one_line_errors
from phasekv.cli.options import TEMPLATE, OptionGroup, expand_groups
from phasekv.cli.planned import DRY_RUN, run_planned
from phasekv.cli.scoring import LOADING
from phasekv.files import check_output
from phasekv.studies.knockout.options import KnockoutOptions

KNOCKOUT = KnockoutOptions()  # the knockout command's defaults
MODEL = typer.Argument(..., help="phasekv checkpoint directory or Hugging Face model directory")
OUT = typer.Option(Path("analysis"), "--out", help="directory for the JSON and PNG")
PROMPTS = OptionGroup(  # the lookup prompts: `_lookup`'s arguments, their defaults the analyses' design
    records=(
        int,
        typer.Option(ANALYSIS_LOOKUP.n_records, "--records", min=1, help="key-name records per lookup prompt"),
    ),
    demos=(int, typer.Option(ANALYSIS_LOOKUP.n_demos, "--demos", min=0, help="demonstrations before the target")),
    mappings=(
        int,
        typer.Option(ANALYSIS_LOOKUP.n_mappings, "--mappings", min=2, help="evaluation mappings (the bootstrap unit)"),
    ),
    placements=(
        int,
        typer.Option(
            ANALYSIS_LOOKUP.placements_per_mapping, "--placements", min=1, help="placements per mapping and residue"
        ),
    ),
    modulus=(int, typer.Option(ANALYSIS_LOOKUP.modulus, "--modulus", min=2, help="group targets by position mod this")),
    protocol=(
        str,
        typer.Option(ANALYSIS_LOOKUP.protocol, "--protocol", help="padding protocol: prefix or in-sequence"),
    ),
    seed=(int, typer.Option(ANALYSIS_LOOKUP.seed, "--seed", help="seed of the prompts and the bootstrap")),
    template=(str, TEMPLATE),
)
HELD_OUT = typer.Option(None, "--held-out-seed", help="draw pairs held out of training with this seed")
QUIET = typer.Option(False, "--quiet", help="no plan, progress bar or time estimate")


def _lookup(records, demos, mappings, placements, modulus, protocol, seed, template, held_out_seed=None):
    return replace(
        ANALYSIS_LOOKUP,
        template=template,
        n_records=records,
        n_demos=demos,
        n_mappings=mappings,
        placements_per_mapping=placements,
        modulus=modulus,
        protocol=protocol,
        seed=seed,
        held_out_seed=held_out_seed,
    )


def _scorer(model: Path, scoring: dict):
    from phasekv.scoring import load_scorer

    return load_scorer(model, **scoring)


def _write(result: dict, out: Path, name: str, plot) -> None:
    from phasekv.evaluate.record import write_results

    json_path = write_results(result, out / f"{name}.json")
    typer.echo(f"wrote {json_path} and {plot(out / f'{name}.png')}")


@expand_groups
def knockout_command(
    model: Path = MODEL,
    layers: bool = typer.Option(False, "--layers", help="knock out whole layers' attention output (any HF model)"),
    query_tokens: int = typer.Option(
        KNOCKOUT.n_query, "--query-tokens", min=1, help="--layers: final positions replaced"
    ),
    calibration_mappings: int = typer.Option(
        KNOCKOUT.calibration_mappings, "--calibration-mappings", min=1, help="calibration-split mappings"
    ),
    stride: int = typer.Option(None, "--stride", min=1, help="fold mod this (default: the model's stride)"),
    prompts: dict = PROMPTS,
    held_out_seed: int = HELD_OUT,
    scoring: dict = LOADING,
    out: Path = OUT,
    quiet: bool = QUIET,
    dry_run: bool = DRY_RUN,
) -> None:
    """Knockout map: accuracy change per KV head (or whole layer) and residue, calibration-mean replacement."""
    from phasekv.studies.knockout.figure import plot_knockout
    from phasekv.studies.knockout.result import KnockoutResult
    from phasekv.studies.knockout.run import run_knockout

    with one_line_errors("knockout"):
        check_output(out, directory=True)  # a bad path fails now, not after the analysis
        lookup = _lookup(**prompts, held_out_seed=held_out_seed)
        options = KnockoutOptions(
            mode="layers" if layers else "heads",
            calibration_mappings=calibration_mappings,
            n_query=query_tokens,
            batch_size=scoring["batch_size"],
            stride=stride,
        )
        scorer = _scorer(model, scoring)
        result = run_planned(lambda planner: run_knockout(scorer, lookup, options, planner), dry_run, quiet)
        if result is None:
            return
        typer.echo(KnockoutResult.from_dict(result).summary)
        _write(result, out, "knockout", lambda path: plot_knockout(result, path))


@expand_groups
def gates_command(
    model: Path = typer.Argument(..., help="checkpoint / HF DeepseekV4 directory, or a training run directory"),
    source: str = typer.Option("auto", "--source", help="run dirs: auto, checkpoints or snapshots"),
    prompts: dict = PROMPTS,
    scoring: dict = LOADING,
    out: Path = OUT,
    quiet: bool = QUIET,
    dry_run: bool = DRY_RUN,
) -> None:
    """Gate concentration (static and per-window effective numbers, phase shares); trajectories for a run dir."""
    from phasekv.analysis.topk import format_topk_hits
    from phasekv.studies.gates.figure import plot_gate_trajectory, plot_gates
    from phasekv.studies.gates.run import format_gates, is_run_dir, run_gate_trajectory, run_gates

    with one_line_errors("gates"):
        check_output(out, directory=True)  # a bad path fails now, not after the analysis
        lookup = _lookup(**prompts)
        if is_run_dir(model):
            trajectory = run_planned(
                lambda planner: run_gate_trajectory(model, lookup, scoring["batch_size"], source, planner),
                dry_run,
                quiet,
            )
            if trajectory is None:
                return
            last = trajectory["steps"][-1]
            typer.echo(f"gate trajectory of {model}: {len(trajectory['steps'])} steps ({trajectory['source']})")
            typer.echo(f"step {last['step']}:\n{format_gates(last['rows'])}")
            _write(trajectory, out, "gate_trajectory", lambda path: plot_gate_trajectory(trajectory, path))
            return
        scorer = _scorer(model, scoring)
        result = run_planned(lambda planner: run_gates(scorer, lookup, scoring["batch_size"], planner), dry_run, quiet)
        if result is None:
            return
        typer.echo(f"gates of {model} over the windows of {result['n_windows_from']['prompts']} prompts")
        typer.echo(format_gates(result["rows"]))
        if "topk_hits" in result:
            typer.echo(format_topk_hits(result["topk_hits"]))
        _write(result, out, "gates", lambda path: plot_gates(result["rows"], path))


@expand_groups
def cycle_command(
    model: Path = MODEL,
    delta: str = typer.Option("-3..3", "--delta", help="deltas: a range -3..3, a list 1,2,-1, or both"),
    resamples: int = typer.Option(2000, "--resamples", min=10, help="bootstrap resamples over mappings"),
    prompts: dict = PROMPTS,
    held_out_seed: int = HELD_OUT,
    scoring: dict = LOADING,
    out: Path = OUT,
    quiet: bool = QUIET,
    dry_run: bool = DRY_RUN,
) -> None:
    """Gate cycling (W = S models): observed vs predicted accuracy change by phase, R^2 grid over deltas."""
    from phasekv.studies.cycle.figure import plot_cycle
    from phasekv.studies.cycle.run import format_cycle, parse_deltas, run_cycle

    with one_line_errors("cycle"):
        check_output(out, directory=True)  # a bad path fails now, not after the analysis
        deltas = parse_deltas(delta)
        lookup = _lookup(**prompts, held_out_seed=held_out_seed)
        scorer = _scorer(model, scoring)
        result = run_planned(lambda planner: run_cycle(scorer, deltas, lookup, resamples, planner), dry_run, quiet)
        if result is None:
            return
        typer.echo(format_cycle(result))
        _write(result, out, "cycle", lambda path: plot_cycle(result, path))
