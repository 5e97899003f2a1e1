"""`phasekv conformance`: one implementation in every execution mode, against a reference, by phase.

Prints one line per mode, writes the result JSON and a PNG into `--out`, and exits 0 when every mode conforms
within `--tolerance`, 1 when one does not (so an engine's CI can run it), 2 on bad input, and 3 when the run is
not judged: the reference's parallel forward, run twice on the same prompts in this process, disagreed with
itself beyond the tolerance, so no mode was compared with it."""

from __future__ import annotations

from pathlib import Path

import typer

from phasekv.cli.errors import one_line_errors
from phasekv.cli.options import FieldGroup, comma_list, expand_groups
from phasekv.cli.scoring import ENDPOINT
from phasekv.studies.conformance.options import VERDICTS, ConformanceOptions

DEFAULTS = ConformanceOptions()
EXIT_CODES = {VERDICTS[True]: 0, VERDICTS[False]: 1, VERDICTS[None]: 3}  # 2: bad input


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise typer.BadParameter(f"sizes are integers separated by commas, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise typer.BadParameter(f"sizes must be positive integers, got {text!r}")
    return sizes


DESIGN = FieldGroup(  # the `ConformanceOptions` fields `phasekv conformance` sets
    DEFAULTS,
    dict(
        length=(int, typer.Option(DEFAULTS.length, "--length", min=3, help="tokens per prompt")),
        prompts=(int, typer.Option(DEFAULTS.prompts, "--prompts", min=1, help="random prompts (token ids)")),
        seed=(int, typer.Option(DEFAULTS.seed, "--seed", help="seed of the prompts (and of preset:NAME weights)")),
        period=(
            int,
            typer.Option(
                DEFAULTS.period,
                "--period",
                min=1,
                help="group positions mod this (default: the model's S, else the reference's, else 4)",
            ),
        ),
        tolerance=(
            float,
            typer.Option(DEFAULTS.tolerance, "--tolerance", help="largest |delta log-prob| and KL allowed"),
        ),
        chunk_sizes=(
            str,
            typer.Option(
                DEFAULTS.chunk_sizes,
                "--chunk-sizes",
                help="chunk sizes, e.g. 3,4,5,7,61 (default: S-1,S,S+1,odd,large)",
            ),
        ),
        ubatch_sizes=(
            str,
            typer.Option(
                DEFAULTS.ubatch_sizes,
                "--ubatch-sizes",
                help="llama.cpp (MODEL.gguf): the ubatch sizes of its `ubatch u` modes, each at every starting "
                "offset (default: 1 to its largest compression ratio)",
            ),
        ),
        modes=(
            str,
            typer.Option(
                DEFAULTS.modes, "--modes", help="only these modes, comma-separated (e.g. parallel,decode,fork)"
            ),
        ),
        dtype=(str, typer.Option(DEFAULTS.dtype, "--dtype", help="float32, float64 or bfloat16 (local models)")),
    ),
    parsers=dict(chunk_sizes=_sizes, ubatch_sizes=_sizes, modes=comma_list),
)


@expand_groups
def conformance_command(
    model: str = typer.Argument(
        None,
        help="the candidate: a phasekv checkpoint, an HF model directory, preset:NAME (a tiny preset with random "
        "weights from --seed) or a GGUF file (run by the pinned llama.cpp: scripts/build_llama_cpp.sh); with "
        "--endpoint, the reference (a local copy of the served model)",
    ),
    reference: str = typer.Option(
        None,
        "--reference",
        help="compare against this model's parallel forward (default: a phasekv model's float64 naive twin, "
        "else the candidate's own)",
    ),
    no_twin: bool = typer.Option(
        False,
        "--no-twin",
        help="compare a phasekv model with its own parallel forward (with --endpoint: the local model's), not "
        "its float64 naive twin: faster at long lengths, blind to a bug that every mode shares",
    ),
    design: dict = DESIGN,
    layers_vs_transformers: str = typer.Option(
        None,
        "--layers-vs-transformers",
        help="instead of MODEL: one phasekv DeepSeek-V4 attention layer (dsv4-sliding, dsv4-csa, dsv4-hca) and "
        "transformers' DeepseekV4Attention with the same weights, each in every mode against the other's parallel "
        "forward, on the same hidden states",
    ),
    index_topk: int = typer.Option(
        None, "--index-topk", min=1, help="with --layers-vs-transformers dsv4-csa: the indexer's top-k (default 3)"
    ),
    tiny_dsv4: Path = typer.Option(
        None,
        "--tiny-dsv4",
        help="instead of MODEL: write a tiny random DeepSeek-V4 (ratios 0/4/128, float32, seed --seed) into this "
        "folder (deepseek/, hf/, model.gguf by llama.cpp's converter) and audit llama.cpp running model.gguf against "
        "transformers' DeepseekV4ForCausalLM with the same weights (needs scripts/build_llama_cpp.sh)",
    ),
    zero_experts: bool = typer.Option(
        False,
        "--zero-experts",
        help="with --tiny-dsv4: routed experts that output exactly 0, so the comparison is of attention, "
        "hyper-connections and shared experts (llama.cpp rounds the MXFP4 experts' activations to 8 bits)",
    ),
    endpoint: dict = ENDPOINT,
    out: Path = typer.Option(Path("conformance"), "--out", help="directory for the JSON and PNG"),
    name: str = typer.Option("conformance", "--name", help="file stem of the JSON and PNG"),
) -> None:
    """Does an implementation compute the same next-token distributions in every execution mode (parallel,
    decode, chunked prefill at every boundary phase, padded batches, forked caches) as its reference, phase by phase?
    Exit 0: conforms; 1: does not; 3: not judged (the reference's parallel forward, run twice, disagreed)."""
    from phasekv.results.record import write_results
    from phasekv.studies.conformance.figure import plot_conformance
    from phasekv.studies.conformance.run import (
        EndpointRunner,
        format_conformance,
        independent_reference,
        load_runner,
        run_conformance,
    )

    def independent_or(runner):  # the float64 naive twin of a phasekv model, unless --no-twin
        return runner if no_twin else independent_reference(runner) or runner

    with one_line_errors("conformance"):
        from phasekv.files import check_not_input, check_output, folder_inputs

        check_output(out, directory=True)  # a bad path fails now, not after every mode ran
        # nor may a run's files replace what it reads: `--out MODEL --name config` would overwrite config.json
        inputs = folder_inputs(*(spec for spec in (model, reference) if spec and not spec.startswith("preset:")))
        for stem in (name, f"{name}-phasekv", f"{name}-transformers"):  # the stems of every kind of run
            for suffix in (".json", ".png"):
                check_not_input(out / f"{stem}{suffix}", inputs)
        options = DESIGN.build(design)
        if layers_vs_transformers is not None:
            if model is not None or reference is not None or endpoint["url"] is not None:
                raise ValueError("--layers-vs-transformers builds both sides: give no MODEL, --reference or --endpoint")
            from phasekv.studies.conformance.dsv4_layers import DEFAULT_TOP_K, layer_kind, layer_runners

            ours, theirs = layer_runners(
                layer_kind(layers_vs_transformers),
                options.seed,
                _dtype(options.dtype),
                top_k=index_topk or DEFAULT_TOP_K,
            )
            runs = [(ours, theirs, f"{name}-phasekv"), (theirs, ours, f"{name}-transformers")]
        elif tiny_dsv4 is not None:
            if model is not None or reference is not None or endpoint["url"] is not None:
                raise ValueError("--tiny-dsv4 writes both sides: give no MODEL, --reference or --endpoint")
            from phasekv.studies.conformance.tiny_dsv4 import write_gguf, write_tiny_dsv4

            paths = write_tiny_dsv4(tiny_dsv4, seed=options.seed, zero_experts=zero_experts)
            gguf_path = write_gguf(paths["deepseek"], tiny_dsv4 / "model.gguf")
            typer.echo(f"wrote {paths['deepseek']}, {paths['hf']} and {gguf_path}")
            candidate = load_runner(str(gguf_path), options.dtype, options.seed)
            runs = [(candidate, load_runner(str(paths["hf"]), options.dtype, options.seed), name)]
        elif zero_experts:
            raise ValueError("--zero-experts applies to --tiny-dsv4 only")
        elif index_topk is not None:
            raise ValueError("--index-topk applies to --layers-vs-transformers dsv4-csa only")
        elif endpoint["url"] is not None:
            from phasekv.cli.scoring import endpoint_scorer_from_options

            ref_spec = reference or model
            if ref_spec is None:
                raise ValueError("--endpoint needs a local reference: MODEL or --reference")
            tokenizer = endpoint["tokenizer"] or (None if ref_spec.startswith("preset:") else Path(ref_spec))
            # the check is of the server as it answers now: an earlier run's cached answers (same card, canaries
            # within tolerance) would hide a changed engine, so a results cache is kept only when --cache names one
            no_cache = endpoint["no_cache"] or endpoint["cache"] is None
            candidate = EndpointRunner(
                endpoint_scorer_from_options(**{**endpoint, "tokenizer": tokenizer, "no_cache": no_cache})
            )
            runs = [(candidate, independent_or(load_runner(ref_spec, options.dtype, options.seed)), name)]
        else:
            if model is None:
                raise ValueError("give MODEL (the candidate), --endpoint URL or --layers-vs-transformers LAYER")
            candidate = load_runner(model, options.dtype, options.seed)
            if reference is not None:
                ref = load_runner(reference, options.dtype, options.seed)
            else:
                ref = None if no_twin else independent_reference(candidate)
            runs = [(candidate, ref, name)]
        verdicts = []
        for candidate, ref, stem in runs:
            result = run_conformance(candidate, options, reference=ref, echo=lambda line: typer.echo(line, err=True))
            typer.echo(format_conformance(result))
            json_path = write_results(result, out / f"{stem}.json")
            typer.echo(f"wrote {json_path} and {plot_conformance(result, out / f'{stem}.png')}")
            verdicts.append(result["verdict"])
    # a failure found in one run stands even where another run could not be judged
    for verdict in (VERDICTS[False], VERDICTS[None], VERDICTS[True]):
        if verdict in verdicts:
            raise typer.Exit(EXIT_CODES[verdict])


def _dtype(name: str):
    import torch

    dtypes = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}
    if name not in dtypes:
        raise ValueError(f"unknown dtype {name!r}; choose one of {', '.join(dtypes)}")
    return dtypes[name]
