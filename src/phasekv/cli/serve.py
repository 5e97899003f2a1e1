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
) -> None:
    """Serve MODEL over an OpenAI-compatible /v1/completions API (token-id prompts, echo, logprobs)."""
    from phasekv.scoring import ScorerError, load_scorer
    from phasekv.serve.server import make_server

    with one_line_errors("serve", (ScorerError, OSError)):
        scorer = load_scorer(model, device=device, dtype=dtype, threads=threads)
        server = make_server(
            scorer, served_model or model.name, host=host, port=port, api_key=api_key, max_new_tokens=max_tokens
        )
    typer.echo(f"serving {server.served_model!r} at {server.url}/v1 (Ctrl-C stops)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
