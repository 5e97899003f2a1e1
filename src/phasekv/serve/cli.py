"""`phasekv serve MODEL` and the options that point `phasekv eval` at a served model.

`ENDPOINT` is an `OptionGroup` (--endpoint (key "url"), --served-model, --tokenizer, --concurrency,
--timeout, --retries, --cache, --text-prompts); `scorer_from_options` builds the scorer an eval
command runs on: an `EndpointScorer` when --endpoint is given, else the local model directory.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import typer

from ..cli_options import OptionGroup

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
    cache=(
        Path,
        typer.Option(None, "--cache", help="results cache (JSONL); default: ~/.cache/phasekv/endpoints/<served>.jsonl"),
    ),
    text_prompts=(
        bool,
        typer.Option(False, "--text-prompts", help="send text (round trip verified token-exactly), not token ids"),
    ),
)


def default_cache_path(served_model: str) -> Path:
    """$XDG_CACHE_HOME (or ~/.cache)/phasekv/endpoints/<served model, made file-safe>.jsonl."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "phasekv" / "endpoints" / f"{re.sub(r'[^A-Za-z0-9._-]+', '_', served_model)}.jsonl"


def endpoint_scorer_from_options(
    url: str,
    served_model: str | None,
    tokenizer: Path | None,
    *,
    concurrency: int = 4,
    timeout: float = 120.0,
    retries: int = 4,
    cache: Path | None = None,
    text_prompts: bool = False,
):
    """An `EndpointScorer` from the ENDPOINT options (API key from the environment)."""
    from ..scoring import ScorerError
    from .client import EndpointScorer

    if not served_model:
        raise ScorerError("--endpoint needs --served-model NAME (the name the server serves, see GET /v1/models)")
    if tokenizer is None:
        raise ScorerError("--endpoint needs --tokenizer DIR (or MODEL): the served model's tokenizer, locally")
    return EndpointScorer(
        url,
        served_model,
        tokenizer,
        concurrency=concurrency,
        timeout=timeout,
        retries=retries,
        cache=default_cache_path(served_model) if cache is None else cache,
        text_prompts=text_prompts,
    )


def scorer_from_options(model: Path | None, scoring: dict, endpoint: dict):
    """The scorer of an eval command: through the server when `endpoint["url"]` (--endpoint) is set
    (MODEL, if given, is the default tokenizer directory), else `load_scorer(model, **scoring)`."""
    from ..scoring import ScorerError, load_scorer

    if endpoint["url"] is not None:
        return endpoint_scorer_from_options(**{**endpoint, "tokenizer": endpoint["tokenizer"] or model})
    if model is None:
        raise ScorerError("give MODEL (a model directory) or --endpoint URL")
    return load_scorer(model, **scoring)


def serve_command(
    model: Path = typer.Argument(..., help="phasekv checkpoint directory or Hugging Face model directory"),
    port: int = typer.Option(8000, min=0, max=65535, help="port (0: any free port)"),
    host: str = typer.Option("127.0.0.1", help="address to bind (default: this machine only)"),
    served_model: str = typer.Option(None, "--served-model", help="the name clients ask for (default: MODEL's name)"),
    api_key: str = typer.Option(
        None, envvar="PHASEKV_SERVE_API_KEY", help="require this Bearer key (env PHASEKV_SERVE_API_KEY)"
    ),
    device: str = typer.Option("cpu", help="torch device, e.g. cpu or cuda"),
    dtype: str = typer.Option("float32", help="model dtype: float32, bfloat16 or float16"),
    threads: int = typer.Option(None, min=1, help="torch CPU threads (default: torch's choice)"),
) -> None:
    """Serve MODEL over an OpenAI-compatible /v1/completions API (token-id prompts, echo, logprobs)."""
    from ..scoring import ScorerError, load_scorer
    from .server import make_server

    try:
        scorer = load_scorer(model, device=device, dtype=dtype, threads=threads)
        server = make_server(scorer, served_model or model.name, host=host, port=port, api_key=api_key)
    except (ScorerError, OSError) as err:
        typer.echo(f"phasekv serve: error: {err}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"serving {server.served_model!r} at {server.url}/v1 (Ctrl-C stops)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
