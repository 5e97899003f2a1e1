"""Expected errors end a command with one line and an exit code, alike in every command."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import typer

from phasekv.files import WriteError

# bad input (configs, files, options; ValueError's subclasses too) and a disk that cannot take the output
INPUT_ERRORS = (ValueError, FileNotFoundError, WriteError)


@contextmanager
def one_line_errors(command: str, errors: tuple[type[BaseException], ...] = INPUT_ERRORS) -> Iterator[None]:
    """`errors` end with `phasekv COMMAND: error: ...` and exit code 2; Ctrl-C ends with one line (its message,
    e.g. how many answers an endpoint audit kept) and exit code 130. PHASEKV_DEBUG=1 shows the traceback."""
    try:
        yield
    except errors as err:
        if os.environ.get("PHASEKV_DEBUG"):
            raise
        typer.echo(f"phasekv {command}: error: {err}", err=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt as err:
        typer.echo(f"phasekv {command}: {err or 'interrupted'}", err=True)
        raise typer.Exit(130) from None
