"""Writing files so that an interrupted write never leaves a half-written file under the real name.

Kept free of torch and the model, so that every layer (report included) can use it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def _read_umask() -> int:
    mask = os.umask(0)  # the only portable way to read it; done once, at import
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_read_umask()  # what open() would give a new file (mkstemp makes 0600)


def write_atomic(path: Path, write: Callable[[str], object]) -> None:
    """Call write(tmp_path), then rename tmp_path to `path` (same directory, so the rename is atomic)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    write_atomic(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
