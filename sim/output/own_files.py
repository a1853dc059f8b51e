"""The small files psdsim keeps beside and inside what it writes, and how it reads them without
trusting what sits at their names.

A results folder carries a marker file (MARKER: the command that wrote it and the size and sha256
of each file it holds); a single file psdsim writes has a hidden record beside it (record_file:
its size and sha256); a destination being written has a lock file (locks.py). Each is read
through open_own_file, so that a link, a pipe or an outsized file at one of those names is named
as such (NotOwnFile), never followed, waited on or read without end."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

from psdsim.sim.errors import ScenarioError

# The marker file of a results folder: the command that wrote it and what it wrote there.
MARKER = ".psdsim-results.json"
# The hidden record beside a single file psdsim wrote (`.NAME.psdsim.json`): its size and sha256,
# renamed into place with it. A later run replaces the file only while it still holds those bytes:
# a file without a record (a user's, whatever it mentions) or one edited since is refused.
RECORD_SUFFIX = ".psdsim.json"
# The marker's file list of a folder a command fills file by file and never empties (validate):
# the same command may write into it again, overwriting only the names it writes, as long as each
# file the marker's `written` records (size and sha256, noted as it was written) is unchanged.
INCREMENTAL = "written file by file; never emptied"


# The most a psdsim-owned small file may hold: a lock document, a single file's record, and a
# results folder's marker (which lists each of its files, so it grows with them).
LOCK_CAP = 4096
RECORD_CAP = 4096
MARKER_CAP = 16 << 20


class NotOwnFile(Exception):
    """What sits at the name of a psdsim-owned small file is not one: a link, a pipe, a device,
    a folder, or a file larger than any psdsim writes there. The message says which."""


def open_own_file(path: Path, cap: int, flags: int = os.O_RDONLY) -> int | None:
    """The open descriptor of the small file psdsim keeps at `path` (a lock, a record, a marker),
    or None where nothing is there (and `flags` has no O_CREAT). Anything else at that name raises
    NotOwnFile before a byte is read: it is looked at first (lstat), and opened without following
    a link or waiting for a writer (O_NOFOLLOW | O_NONBLOCK), so a pipe or a device never hangs
    psdsim nor feeds it without end, and checked again once open (the name may change meanwhile)."""
    try:
        before = os.lstat(path)
    except FileNotFoundError:
        if not flags & os.O_CREAT:
            return None
    else:
        _check_own_file(before, cap)
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0), 0o666)
    except FileNotFoundError:
        if flags & os.O_CREAT:   # not a file gone meanwhile: its folder is, or (/proc) takes none
            raise
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotOwnFile("is a link") from None
        raise
    try:
        _check_own_file(os.fstat(fd), cap)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_own_file(info: os.stat_result, cap: int) -> None:
    if stat.S_ISLNK(info.st_mode):
        raise NotOwnFile("is a link")
    if not stat.S_ISREG(info.st_mode):
        raise NotOwnFile("is not a regular file")
    if info.st_size > cap:
        raise NotOwnFile(f"holds {info.st_size:,} bytes, more than psdsim ever writes there ({cap:,})")


def read_own_file(path: Path, cap: int) -> bytes | None:
    """The bytes of the small file psdsim keeps at `path` (open_own_file's rule), None if absent."""
    fd = open_own_file(path, cap)
    if fd is None:
        return None
    try:
        return os.pread(fd, cap + 1, 0)[:cap]
    finally:
        os.close(fd)


def record_file(real: Path) -> Path:
    """The hidden record (size and sha256) of the single file `real` that psdsim wrote."""
    return real.parent / f".{real.name}{RECORD_SUFFIX}"


def folder_marker(out: Path) -> dict[str, Any] | None:
    """The marker of the folder `out`, or None where there is none psdsim could have written
    (absent, unreadable, a pipe, a link, not JSON, larger than MARKER_CAP)."""
    try:
        doc = json.loads(read_own_file(out / MARKER, MARKER_CAP) or b"")
    except (OSError, NotOwnFile, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("files"), list | str | dict) else None


def foreign_refusal(option: str, path: Path, kept: str, given: Path, why: str) -> ScenarioError:
    """The refusal of the name where psdsim keeps the `kept` (lock, record) of `given`, when what
    is there is not one psdsim wrote."""
    return ScenarioError(option, f"{str(path)!r}, where psdsim keeps the {kept} of {str(given)!r}, {why}; "
                         "psdsim never deletes or overwrites what it did not write",
                         f"move that away yourself, or write elsewhere with {option}")
