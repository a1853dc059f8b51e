"""Looking at a path the user gave for psdsim to read, so that every way the system can refuse it
is one line naming the field, not a traceback.

Path.resolve(), exists(), is_file() and open() raise for a name the system cannot follow: a loop
of symbolic links (RuntimeError from Python 3.11's resolve(), OSError ELOOP elsewhere), a NUL
byte inside the name (ValueError), a folder on the way psdsim may not search or a file it may not
read (PermissionError), a name too long (ENAMETOOLONG). Each reader of a file the user names
(scenario fields, catalog, model configs, calibrate's traces, validate's folders) goes through
`input_path`, `input_file` or `input_folder` first, so its own reading meets only the file's text.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from psdsim.sim.errors import ScenarioError

_MISSING = (FileNotFoundError, NotADirectoryError)


def path_trouble(exc: BaseException) -> str:
    """Why the system refused a path, in words (the strerror where there is one)."""
    if isinstance(exc, RuntimeError) or getattr(exc, "errno", None) == errno.ELOOP:
        return "a loop of symbolic links"
    if isinstance(exc, ValueError):
        return "the name holds a NUL byte"
    return getattr(exc, "strerror", None) or str(exc)


def _refused(field: str, path: str | Path, exc: BaseException, fix: str) -> ScenarioError:
    return ScenarioError(field, f"cannot use {str(path)!r} ({path_trouble(exc)})", fix)


def _stat(real: Path, field: str, given: str | Path, fix: str) -> os.stat_result | None:
    """The file's status, None where nothing is there (each reader words that its own way)."""
    try:
        return real.stat()
    except _MISSING:
        return None
    except (OSError, ValueError) as exc:
        raise _refused(field, given, exc, fix) from None


def input_path(path: str | Path, field: str, fix: str) -> Path:
    """`path` made absolute with every link resolved (readers compare and cache by it). A path
    that does not exist passes; one the system cannot follow is refused in one line."""
    try:
        real = Path(path).resolve()
    except (OSError, RuntimeError, ValueError) as exc:
        raise _refused(field, path, exc, fix) from None
    _stat(real, field, path, fix)
    return real


def input_file(path: str | Path, field: str, what: str, fix: str) -> Path:
    """The resolved path of the regular file `path` (given in `field`, meant to be `what`: "a
    profile"), refused in one line if missing, a folder, a pipe or device (read forever, or
    never), or a file psdsim may not open."""
    real = input_path(path, field, fix)
    status = _stat(real, field, path, fix)
    if status is None:
        raise ScenarioError(field, f"file {str(path)!r} not found", fix)
    if stat.S_ISDIR(status.st_mode):
        raise ScenarioError(field, f"{str(path)!r} is a folder, not {what}", fix)
    if not stat.S_ISREG(status.st_mode):
        raise ScenarioError(field, f"{str(path)!r} is not a regular file (a pipe, socket or device)", fix)
    try:
        with open(real, "rb"):
            pass
    except OSError as exc:
        raise _refused(field, path, exc, fix) from None
    return real


def input_folder(path: str | Path, field: str, fix: str) -> Path:
    """The resolved path of the folder `path`, refused in one line if missing, not a folder, or
    one psdsim may not list."""
    real = input_path(path, field, fix)
    status = _stat(real, field, path, fix)
    if status is None:
        raise ScenarioError(field, f"{str(path)!r} not found", fix)
    if not stat.S_ISDIR(status.st_mode):
        raise ScenarioError(field, f"{str(path)!r} is a file, not a folder", fix)
    try:
        os.listdir(real)
    except OSError as exc:
        raise _refused(field, path, exc, fix) from None
    return real
