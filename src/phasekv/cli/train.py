"""Command-line entry points: `train_command` (mounted as `phasekv train`) and `data_app` (`phasekv data
tokenize`). Training from a run file alone, the form torchrun launches, is `python -m phasekv.train`.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import typer

from phasekv.cli.errors import one_line_errors

COMMAND_ONLY = ("ctx", "out", "config", "resume", "progress")  # every other parameter of train_command is a run option


def _explicit(ctx: typer.Context) -> list[str]:
    """Run options the user typed (not left at their defaults)."""
    return [n for n in RUN_OPTIONS if getattr(ctx.get_parameter_source(n), "name", None) == "COMMANDLINE"]


def train_command(
    ctx: typer.Context,
    out: Path = typer.Option(..., "--out", help="run directory (checkpoints, logs, gate snapshots)"),
    config: Path | None = typer.Option(None, "--config", help="a run.json; run options are then not allowed"),
    resume: bool = typer.Option(False, "--resume", help="continue the run in --out from its latest checkpoint"),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="show a progress bar"),
    preset: str = typer.Option("w8s8-1kv", help="model preset (see `phasekv models`)"),
    size: str = typer.Option("tiny", help="model size: tiny or paper"),
    data: str = typer.Option(
        "mixture", help="mixture (synthetic retrieval), tokens (--tokens-dir) or mixed (--text-fraction of both)"
    ),
    tokens_dir: Path | None = typer.Option(None, help="token directory from `phasekv data tokenize`"),
    text_fraction: float = typer.Option(
        0.0, help="mixed: fraction of every batch taken from --tokens-dir text, the rest from the mixture"
    ),
    tokenizer: Path | None = typer.Option(None, help="HF tokenizer dir for the mixture (default: word-level)"),
    steps: int = typer.Option(1000, min=1, help="optimiser steps"),
    batch_size: int = typer.Option(16, min=1, help="global batch (sequences per step)"),
    seq_len: int = typer.Option(256, min=1, help="tokens per sequence (model input length)"),
    accum_steps: int = typer.Option(1, min=1, help="micro-batches per step and process"),
    lr: float = typer.Option(3e-3, help="peak learning rate"),
    warmup_steps: int = typer.Option(100, min=0),
    min_lr_fraction: float = typer.Option(0.1, help="cosine floor as a fraction of lr"),
    weight_decay: float = typer.Option(0.1, help="AdamW decay on weight matrices"),
    grad_clip: float = typer.Option(1.0, help="max global gradient norm"),
    seed: int = typer.Option(0, help="model initialisation seed"),
    data_seed: int = typer.Option(0, help="data seed (same data for every model of a run)"),
    records: int = typer.Option(16, min=1, help="mixture: records per sequence (final)"),
    records_start: int = typer.Option(4, min=1, help="mixture: records at the start of the curriculum"),
    curriculum_fraction: float = typer.Option(0.4, help="mixture: fraction of training the curriculum takes"),
    max_queries: int = typer.Option(24, min=1, help="mixture: queries per sequence (each record once, then extras)"),
    precision: str = typer.Option("auto", help="auto (bf16 on capable CUDA), fp32 or bf16"),
    parallel: str = typer.Option("ddp", help="ddp or fsdp under torchrun"),
    threads: int = typer.Option(1, min=0, help="torch threads per process (0: torch default)"),
    checkpoint_every: int = typer.Option(500, min=0),
    keep_checkpoints: int = typer.Option(0, min=0, help="keep the newest N checkpoints (0: all)"),
    log_every: int = typer.Option(10, min=0),
    val_every: int = typer.Option(100, min=0, help="validation interval (0: only at the end)"),
    val_batches: int = typer.Option(4, min=1),
    gate_every: int = typer.Option(0, min=0, help="gate snapshot interval (0: only --gate-steps)"),
    gate_steps: str = typer.Option("", help="comma-separated steps for gate snapshots, e.g. 0,100,500"),
    random_window_offset: bool = typer.Option(
        False, "--random-window-offset", help="each step: every compressed layer's windows at a seeded random offset"
    ),
    static_concentration_weight: float = typer.Option(
        0.0, help="lambda of the static-concentration gate regulariser (0: off)"
    ),
    concentration_windows: str = typer.Option(
        "all", help="the regulariser's windows: all, or records (windows holding a record key; mixture data)"
    ),
    indexer_warmup_steps: int = typer.Option(
        0,
        min=0,
        help="DeepSeek-V4 CSA layers: the first N steps read every entry while the indexer learns (then top-k)",
    ),
) -> None:
    """Pretrain a model on the synthetic retrieval mixture or on token files (torchrun-ready)."""
    from phasekv.config import ConfigError
    from phasekv.files import WriteError, check_output
    from phasekv.model import CheckpointError
    from phasekv.train.config import RUN_FILE, load_run_config
    from phasekv.train.loop import train

    typed = _explicit(ctx)
    if config is not None and typed:
        raise typer.BadParameter(f"--config was given, so run options are not allowed (got {typed})")
    options = {name: ctx.params[name] for name in RUN_OPTIONS}
    with one_line_errors("train", (ConfigError, CheckpointError, FileNotFoundError, ValueError, WriteError)):
        check_output(out, directory=True)  # a bad path fails now, not after the data and model are built
        if resume and not (out / RUN_FILE).is_file():  # `python -m phasekv.train --resume` (the runner's) starts one
            raise ValueError(f"--resume: {out} holds no run ({RUN_FILE} is missing); drop --resume to start a new run")
        if config is not None:
            run = load_run_config(config)
        elif resume and not typed and (out / RUN_FILE).is_file():
            run = load_run_config(out)  # `--out DIR --resume` alone continues the saved run
        else:
            run = run_config_from_options(options)
        result = train(run, out, resume=resume, progress=progress)
    typer.echo(json.dumps({"checkpoint": str(result.checkpoint), "step": result.step, **result.metrics}))


def run_config_from_options(o: dict):
    """The RunConfig that command-line options `o` describe (keys: RUN_OPTIONS, as in `train_command`)."""
    from dataclasses import fields

    from phasekv.corpus.mixture import MixtureConfig
    from phasekv.train.config import DataConfig, ModelSpec, OptimConfig, RunConfig

    mixture = MixtureConfig(
        records=o["records"],
        records_start=o["records_start"],
        curriculum_fraction=o["curriculum_fraction"],
        max_queries=o["max_queries"],
        tokenizer=str(o["tokenizer"]) if o["tokenizer"] else None,
    )
    same_names = {f.name for f in fields(RunConfig)} - {"model", "data", "optim", "gate_steps"}
    return RunConfig(
        model=ModelSpec(o["preset"], o["size"]),
        data=DataConfig(
            o["data"], o["data_seed"], mixture, str(o["tokens_dir"]) if o["tokens_dir"] else None, o["text_fraction"]
        ),
        optim=OptimConfig(**{f.name: o[f.name] for f in fields(OptimConfig) if f.name in o}),
        gate_steps=tuple(int(s) for s in o["gate_steps"].split(",") if s.strip()),
        **{name: o[name] for name in same_names},
    )


RUN_OPTIONS = [name for name in inspect.signature(train_command).parameters if name not in COMMAND_ONLY]


data_app = typer.Typer(no_args_is_help=True, add_completion=False)


@data_app.callback()
def data() -> None:  # a callback keeps `tokenize` a subcommand although it is the only one
    """Prepare training data."""


@data_app.command()
def tokenize(
    files: list[Path] = typer.Argument(..., help="UTF-8 text files (one document each)"),
    tokenizer: Path = typer.Option(..., "--tokenizer", help="a local Hugging Face tokenizer directory"),
    out: Path = typer.Option(..., "--out", help="output token directory"),
    val_fraction: float = typer.Option(0.05, help="tail fraction of each file kept for validation"),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
) -> None:
    """Tokenize text files into train.bin / val.bin (uint16 or uint32) and tokens.json."""
    from phasekv.corpus.tokenize import tokenize_files
    from phasekv.corpus.tokens import read_header

    with one_line_errors("data tokenize", (FileNotFoundError, ValueError, OSError)):
        header = read_header(tokenize_files(files, tokenizer, out, val_fraction, progress=progress).parent)
    counts = ", ".join(f"{s}: {v['count']:,}" for s, v in header["splits"].items())
    typer.echo(f"wrote {out} ({header['dtype']}, vocab {header['vocab_size']:,}; tokens {counts})")
