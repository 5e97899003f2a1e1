"""Writing files so that an interrupted write never leaves a half-written file under the real name, a full
or read-only disk is one clear `WriteError`, and no command writes over a file it reads.

Kept free of torch and the model, so that every layer (report included) can use it.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path


def _read_umask() -> int:
    mask = os.umask(0)  # the only portable way to read it; done once, at import
    os.umask(mask)
    return mask


MIN_FREE_BYTES = 64 * 1024  # below this a disk counts as full before a command starts
FILE_MODE = 0o666 & ~_read_umask()  # what open() would give a new file (mkstemp makes 0600)


class WriteError(OSError):
    """A file could not be written (full disk, read-only or unwritable folder); the message says which and
    what to do. Anything already at the path is unchanged."""


# what the user can fix by freeing space or choosing another place, as opposed to a bug
_DISK_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG}


def write_atomic(path: Path, write: Callable[[str], object]) -> None:
    """Call write(tmp_path), then rename tmp_path to `path` (same directory, so the rename is atomic).
    A full or read-only disk raises WriteError, leaving any earlier file at `path` as it was."""
    path = Path(path)
    made = _missing_folders(path.parent)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        _remove_empty(made)
        raise _write_error(path, err) from None
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        _remove_empty(made)  # a failed write leaves no empty folder behind either
        if isinstance(err, OSError):
            raise _write_error(path, err) from None
        raise


def _missing_folders(folder: Path) -> list[Path]:
    """The folders of `folder`'s chain that do not exist yet, deepest first."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def _remove_empty(folders: list[Path]) -> None:
    for folder in folders:  # deepest first; one that holds something now (another writer's) stays
        try:
            folder.rmdir()
        except OSError:
            return


@contextmanager
def disk_errors(path: Path) -> Iterator[None]:
    """Turn a full or read-only disk met while writing `path` in place (an append) into one WriteError."""
    try:
        yield
    except OSError as err:
        raise _write_error(Path(path), err) from None


def check_space(folder: Path, n_bytes: int, what: str) -> None:
    """WriteError when `folder`'s disk has less than `n_bytes` free for `what`: for writers whose own errors on a
    full disk are not OSErrors (safetensors, torch.save), asked before writing and again after a failure."""
    free = shutil.disk_usage(folder).free
    if free < n_bytes:
        raise WriteError(
            f"cannot write {what}: {folder} has {free / 1e6:.3g} MB free, it needs about {n_bytes / 1e6:.3g} MB "
            "(free space or choose a writable place, then run again; any earlier file there is unchanged)"
        )


def _write_error(path: Path, err: OSError) -> OSError:
    if err.errno not in _DISK_ERRORS:
        return err
    return WriteError(
        f"cannot write {path}: {err.strerror or err} (free space or choose a writable place, then run again; "
        "any earlier file there is unchanged)"
    )


def check_not_input(out: Path | str, inputs: Iterable[Path | str], option: str = "--out", suffix: str = "") -> Path:
    """ValueError when writing `out` would destroy what the command reads: `out` is one of `inputs`, or lies in an
    input folder and ends in `suffix` (the kind of file the command reads there). Returns `out`."""
    target = Path(out).resolve()
    for source in map(Path, inputs):
        resolved = source.resolve()
        inside = resolved.is_dir() and target.is_relative_to(resolved) and target.name.endswith(suffix)
        if target == resolved or inside:
            raise ValueError(
                f"{option} {out} would overwrite {'a file read from ' if inside else ''}this command's input "
                f"{source}: give {option} a path outside it"
            )
    return Path(out)


def folder_inputs(*paths: Path | str | None) -> list[Path]:
    """Each given file, and the files directly in each given folder: what a command that writes its results into a
    folder must not replace (`check_not_input`), e.g. a model folder's config.json. Writing beside them is allowed,
    and so is replacing an earlier result there (a phasekv result JSON or a figure: no model is read from them)."""
    found = []
    for path in (Path(p) for p in paths if p is not None):
        found += (
            [f for f in sorted(path.iterdir()) if f.is_file() and not _earlier_result(f)] if path.is_dir() else [path]
        )
    return found


def _earlier_result(path: Path) -> bool:
    if path.suffix == ".png":
        return True
    if path.suffix != ".json":
        return False
    try:
        schema = json.loads(path.read_text(encoding="utf-8")).get("schema")
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(schema, str) and schema.startswith("phasekv.")


def write_text_atomic(path: Path, text: str) -> None:
    write_atomic(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def check_output(path: Path | str, *, directory: bool = False, option: str = "--out") -> Path:
    """Check, before any work, that `path` can be written: a file (or with `directory`, a folder) that is
    either writable where it is or can be made under its first existing ancestor, which must be a
    writable folder. Creates nothing. ValueError naming `option` otherwise; returns `path`."""
    path = Path(path)
    what = "folder" if directory else "file"
    if path.exists():
        if directory and not path.is_dir():
            raise ValueError(f"{option} {path} is a file, not a folder")
        if not directory and path.is_dir():
            raise ValueError(f"{option} {path} is a folder: give a file name")
        writable = os.access(path, os.W_OK | (os.X_OK if directory else 0))
        if not writable:
            raise ValueError(f"{option} {path}: the {what} is not writable")
        if not directory and not os.access(path.parent, os.W_OK | os.X_OK):  # written by a rename beside it
            raise ValueError(f"{option} {path}: its folder {path.parent} is not writable")
        _check_not_full(path if directory else path.parent, path, option)
        return path
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ValueError(f"{option} {path}: {ancestor} is a file, so no {what} can be made under it")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ValueError(f"{option} {path}: {ancestor} is not writable")
    _check_not_full(ancestor, path, option)
    return path


def _check_not_full(folder: Path, path: Path, option: str) -> None:
    """A disk already full is said before the work whose result could not be written (its size is not known yet:
    a disk that fills during the run is the write's WriteError)."""
    free = shutil.disk_usage(folder).free
    if free < MIN_FREE_BYTES:
        raise ValueError(f"{option} {path}: the disk of {folder} is full ({free // 1024} kB free); free space first")
