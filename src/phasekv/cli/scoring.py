"""The options that choose the model a command scores, shared by `phasekv eval` and the analyses.

`LOADING` and `SCORING` are `OptionGroup`s of `load_scorer`'s keyword arguments; `ENDPOINT` points `phasekv
eval` at an OpenAI-compatible server (--endpoint (key "url"), --served-model, --tokenizer, --concurrency,
--timeout, --retries, --backoff, --max-wait, --max-response-mb, --cache, --no-cache, --text-prompts, --echo/--no-echo,
--top-k, --canary-tolerance);
`scorer_from_options` builds the scorer an eval command runs on: an `EndpointScorer` when --endpoint is given,
else the local model directory, whose answers are kept in an answer cache as they are scored (--cache, --no-cache
apply to both), so that a run stopped part way (a full disk, Ctrl-C) resumes without scoring anything twice.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import typer

from phasekv.cli.options import FieldGroup, OptionGroup
from phasekv.scoring.press_spec import press_help

# phasekv.serve.transport's DEFAULT_MAX_WAIT_S and DEFAULT_MAX_RESPONSE_BYTES (in MiB), here so that --help loads no
# torch (importing phasekv.serve does); a test keeps them equal
MAX_WAIT_S = 300.0
MAX_RESPONSE_MB = 256.0


def _batch_size(default: int):
    return typer.Option(default, "--batch-size", min=1, help="prompts per forward pass")


# How a local model is loaded and run (`load_scorer`'s keyword arguments). The analyses read a model's
# internals, so they take LOADING only (`study_loading`: with a study's own batch size); the probes take
# SCORING (also workers, dtype and a press; its threads are per worker, see
# `phasekv.scoring.base.choose_parallelism`).
LOADING = OptionGroup(
    batch_size=(int, _batch_size(16)),
    threads=(int, typer.Option(None, "--threads", min=1, help="torch CPU threads (default: torch's choice)")),
    device=(str, typer.Option("cpu", "--device", help="torch device, e.g. cpu or cuda")),
)


def study_loading(defaults) -> FieldGroup:
    """LOADING with --batch-size at the study's own default (`defaults.batch_size`, its options')."""
    return FieldGroup(defaults, {**LOADING, "batch_size": (int, _batch_size(defaults.batch_size))})


SCORING = OptionGroup(
    {
        **LOADING,
        "threads": (
            int,
            typer.Option(
                None,
                "--threads",
                min=1,
                help="torch CPU threads per worker (default 1; alone: one worker with this many)",
            ),
        ),
    },
    workers=(
        int,
        typer.Option(
            None,
            min=1,
            help="batches scored at once, each on its own threads (default: one per usable CPU core, which beats "
            "intra-op threads when another job holds a core)",
        ),
    ),
    dtype=(str, typer.Option("float32", help="model dtype: float32, bfloat16 or float16")),
    press=(
        str,
        typer.Option(
            None,
            "--press",
            help=f"compress an HF model's KV cache: {press_help()}; a chunk grid becomes the period check's stride",
        ),
    ),
)

ENDPOINT = OptionGroup(
    url=(
        str,
        typer.Option(None, "--endpoint", help="score through this OpenAI-compatible server (http://host:port)"),
    ),
    served_model=(str, typer.Option(None, "--served-model", help="the model name the server serves (with --endpoint)")),
    tokenizer=(
        Path,
        typer.Option(None, "--tokenizer", help="local directory with the served model's tokenizer (default: MODEL)"),
    ),
    concurrency=(int, typer.Option(4, "--concurrency", min=1, help="requests in flight at once (with --endpoint)")),
    timeout=(float, typer.Option(120.0, "--timeout", min=0.001, help="seconds per request before it is retried")),
    retries=(int, typer.Option(4, "--retries", min=0, help="retries on 429/5xx, timeouts and connection errors")),
    backoff=(float, typer.Option(0.5, "--backoff", min=0.0, help="seconds before the first retry (doubling)")),
    max_wait=(
        float,
        typer.Option(
            MAX_WAIT_S,
            "--max-wait",
            min=0.001,
            help="seconds one request may take in all, its retries and their waits included; past 10 s each failed "
            "attempt is printed as it happens",
        ),
    ),
    max_response_mb=(
        float,
        typer.Option(
            MAX_RESPONSE_MB,
            "--max-response-mb",
            min=0.001,
            help="the largest response body read (MiB); a larger one is refused",
        ),
    ),
    cache=(
        Path,
        typer.Option(
            None,
            "--cache",
            help="answers cache (JSONL), so that a stopped run resumes; default: "
            "~/.cache/phasekv/endpoints/<served>-<fingerprint>.jsonl through --endpoint, "
            "~/.cache/phasekv/answers/<model>-<fingerprint>.jsonl for a local model",
        ),
    ),
    no_cache=(bool, typer.Option(False, "--no-cache", help="keep answers in memory only (no resume)")),
    text_prompts=(
        bool,
        typer.Option(False, "--text-prompts", help="send text (round trip verified token-exactly), not token ids"),
    ),
    echo=(
        bool,
        typer.Option(
            None,
            "--echo/--no-echo",
            help="score answers with echo (one request each) or without (one request per answer token, for "
            "servers that ignore echo such as llama.cpp's); default: ask the server",
        ),
    ),
    top_k=(int, typer.Option(20, "--top-k", min=1, help="log-probs asked per position without echo")),
    canary_tolerance=(
        float,
        typer.Option(
            1e-3,
            "--canary-tolerance",
            min=0.0,
            help="nats the canary log-probs may move before a results cache counts as another model's "
            "(raise it for a nondeterministic server)",
        ),
    ),
)


def default_cache_path(served_model: str, fingerprint_id: str, kind: str = "endpoints") -> Path:
    """$XDG_CACHE_HOME (or ~/.cache)/phasekv/<kind>/<model, made file-safe>-<fingerprint id>.jsonl: one file per
    server, model and tokenizer (kind "endpoints") or per local model and scoring settings (kind "answers"), so the
    default never meets another model's answers."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", served_model)
    return root / "phasekv" / kind / f"{name}-{fingerprint_id}.jsonl"


def _checked_cache(cache: Path | None, no_cache: bool) -> None:
    from phasekv.scoring import ScorerError

    if no_cache and cache is not None:
        raise ScorerError("give --cache FILE or --no-cache, not both")
    if cache is not None:  # a folder or an unwritable place fails now, not at the first answer
        from phasekv.files import check_output

        check_output(cache, option="--cache")


def endpoint_scorer_from_options(
    url: str,
    served_model: str | None,
    tokenizer: Path | None,
    *,
    concurrency: int = 4,
    timeout: float = 120.0,
    retries: int = 4,
    backoff: float = 0.5,
    max_wait: float = MAX_WAIT_S,
    max_response_mb: float = MAX_RESPONSE_MB,
    cache: Path | None = None,
    no_cache: bool = False,
    text_prompts: bool = False,
    echo: bool | None = None,
    top_k: int = 20,
    canary_tolerance: float = 1e-3,
):
    """An `EndpointScorer` from the ENDPOINT options (API key from the environment); what loading
    the results cache repaired is printed to stderr."""
    from phasekv.scoring import ScorerError
    from phasekv.serve.client import EndpointScorer

    if not served_model:
        raise ScorerError("--endpoint needs --served-model NAME (the name the server serves, see GET /v1/models)")
    if tokenizer is None:
        raise ScorerError("--endpoint needs --tokenizer DIR (or MODEL): the served model's tokenizer, locally")
    _checked_cache(cache, no_cache)
    scorer = EndpointScorer(
        url,
        served_model,
        tokenizer,
        concurrency=concurrency,
        timeout=timeout,
        retries=retries,
        backoff=backoff,
        max_wait=max_wait,
        max_response_bytes=max(1, round(max_response_mb * 2**20)),
        notify=lambda line: typer.echo(line, err=True),
        cache=None if no_cache else cache or default_cache_path,
        text_prompts=text_prompts,
        echo=echo,
        top_k=top_k,
        canary_tolerance=canary_tolerance,
    )
    if scorer.notice:
        typer.echo(scorer.notice, err=True)
    return scorer


def scorer_from_options(model: Path | None, scoring: dict, endpoint: dict):
    """The scorer of an eval command: through the server when `endpoint["url"]` (--endpoint) is set
    (MODEL, if given, is the default tokenizer directory), else `load_scorer(model, **scoring)` with its answer
    cache (`local_answer_cache`) unless --no-cache."""
    from phasekv.scoring import CachedAnswers, ScorerError, load_scorer

    if endpoint["url"] is not None:
        return endpoint_scorer_from_options(**{**endpoint, "tokenizer": endpoint["tokenizer"] or model})
    if model is None:
        raise ScorerError("give MODEL (a model directory) or --endpoint URL")
    _checked_cache(endpoint["cache"], endpoint["no_cache"])
    scorer = load_scorer(model, **scoring)
    if not endpoint["no_cache"]:
        scorer.answer_cache = CachedAnswers(local_answer_cache(scorer, model, scoring, endpoint["cache"]))
        if scorer.answer_cache.notice:
            typer.echo(scorer.answer_cache.notice, err=True)
    return scorer


def local_fingerprint(scorer, model: Path, scoring: dict) -> dict:
    """What produces a local model's answers: its files' contents, the press, the settings that change floats
    (dtype, device, batch size, threads per worker), phasekv's answering code and the software versions."""
    from phasekv.provenance import package_version, software_versions
    from phasekv.reproduce.cache import ANSWERING_PACKAGES, checkpoint_hash, source_hash

    return {
        "model": checkpoint_hash(model),
        "press": scoring.get("press"),
        "dtype": scorer.dtype,
        "device": str(scorer.device),
        "batch_size": scorer.batch_size,
        "threads": scorer.threads,
        "code": source_hash(*ANSWERING_PACKAGES),
        "software": software_versions() | ({"kvpress": package_version("kvpress")} if _uses_kvpress(scoring) else {}),
    }


def _uses_kvpress(scoring: dict) -> bool:
    from phasekv.scoring.press_spec import needs_kvpress, parse_press

    return scoring.get("press") is not None and needs_kvpress(parse_press(scoring["press"]))


def local_answer_cache(scorer, model: Path, scoring: dict, path: Path | None):
    """The answer cache of a local model: `path` (--cache) or the default file of its fingerprint, refused (one
    line) when it holds another model's or setting's answers."""
    from phasekv.serve.cache import ResultCache, fingerprint_id

    fingerprint = local_fingerprint(scorer, model, scoring)
    if path is None:
        path = default_cache_path(Path(model).resolve().name, fingerprint_id(fingerprint), kind="answers")
    return ResultCache(path, fingerprint)
