"""`phasekv serve MODEL`: serve a local model over an OpenAI-compatible API (the options that point
`phasekv eval` at a served model are `phasekv.cli.scoring.ENDPOINT`)."""

from __future__ import annotations

from pathlib import Path

import typer

from phasekv.cli.errors import one_line_errors


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
    max_tokens: int = typer.Option(2048, "--max-tokens", min=1, help="the largest max_tokens a request may ask for"),
    max_prompt_tokens: int = typer.Option(
        None, "--max-prompt-tokens", min=1, help="the longest prompt accepted (default: the model's context, else 8192)"
    ),
    max_prompts: int = typer.Option(64, "--max-prompts", min=1, help="the most prompts one request may list"),
    max_logprob_entries: int = typer.Option(
        2_000_000, "--max-logprob-entries", min=1, help="the most log-probs (logprobs x tokens) one response may hold"
    ),
    workers: int = typer.Option(32, "--workers", min=1, help="connections served at once (the model runs one)"),
    backlog: int = typer.Option(
        256, "--backlog", min=1, help="connections that may be pending (sending their request or waiting for a worker)"
    ),
    read_timeout: float = typer.Option(
        30.0, "--read-timeout", min=0.01, help="seconds a client has to send its whole request (and to read its answer)"
    ),
    max_request_seconds: float = typer.Option(
        120.0, "--max-request-seconds", min=0.01, help="seconds of compute one request may take before it is refused"
    ),
) -> None:
    """Serve MODEL over an OpenAI-compatible /v1/completions API (token-id prompts, echo, logprobs)."""
    from phasekv.scoring import ScorerError, load_scorer
    from phasekv.serve.completions import Limits
    from phasekv.serve.server import context_length, make_server

    with one_line_errors("serve", (ScorerError, OSError)):
        scorer = load_scorer(model, device=device, dtype=dtype, threads=threads)
        limits = Limits(
            max_new_tokens=max_tokens,
            max_prompt_tokens=max_prompt_tokens or context_length(scorer),
            max_prompts=max_prompts,
            max_logprob_entries=max_logprob_entries,
            max_request_seconds=max_request_seconds,
        )
        server = make_server(
            scorer, served_model or model.name, host=host, port=port, api_key=api_key, limits=limits,
            workers=workers, backlog=backlog, read_timeout=read_timeout,
        )  # fmt: skip
    typer.echo(f"serving {server.served_model!r} at {server.url}/v1 (Ctrl-C stops)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
