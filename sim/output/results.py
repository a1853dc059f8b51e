"""Writing a run's results folder: summary.json, steps.csv, requests.csv, scenario.toml.

Everything is written into a temporary folder beside the destination and renamed into place,
so a results folder is either complete or absent: an interrupted run leaves nothing half-written.

psdsim never deletes or overwrites what it did not write. A results folder carries a marker file
(MARKER: the command that wrote it and the size and sha256 of each file it holds); a later run of
the same command may replace that folder only while every file in it is one the marker lists, byte
for byte, and every folder in it holds one of them: an existing file, a file or folder the user
added or a file the user edited, the working directory or a folder above it are refused before any
work is written. A single file psdsim writes has a hidden record beside it (record_file: its size
and sha256), and is replaced only while it still holds those bytes.

Each write holds a lock on its destination (output_lock) from its checks to its last rename, so
that two psdsim processes never write one place at once; the lock file records the holder's pid
and the mark on its staging names, which is how the next writer knows what a killed one left.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import re
import secrets
import shutil
import signal
import stat
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from psdsim.sim.errors import ScenarioError
from psdsim.sim.input_paths import path_trouble
from psdsim.sim.output.plots import occupancy_png
from psdsim.sim.scenario import scenario_to_toml
from psdsim.sim.spill import blocks

try:
    import fcntl
except ImportError:   # not POSIX: writes are not locked
    fcntl = None  # type: ignore[assignment]

MARKER = ".psdsim-results.json"
# The hidden record beside a single file psdsim wrote (`.NAME.psdsim.json`): its size and sha256,
# renamed into place with it. A later run replaces the file only while it still holds those bytes:
# a file without a record (a user's, whatever it mentions) or one edited since is refused.
RECORD_SUFFIX = ".psdsim.json"
# The marker's file list of a folder a command fills file by file and never empties (validate):
# the same command may write into it again, overwriting only the names it writes, as long as each
# file the marker's `written` records (size and sha256, noted as it was written) is unchanged.
INCREMENTAL = "written file by file; never emptied"


# Cells csv.writer (QUOTE_MINIMAL) puts in quotes, doubling the quotes inside.
_QUOTED = (",", '"', "\r", "\n")


def _quoted(text: str) -> str:
    return '"' + text.replace('"', '""') + '"' if any(c in text for c in _QUOTED) else text


def _cell(value: Any) -> str:
    """One cell of an object column: floats shortest round-trip, NaN and None empty, bools
    true/false, anything else its str(), quoted where csv would."""
    if isinstance(value, (float, np.floating)):
        return "" if math.isnan(value) else repr(float(value))
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, np.integer):
        return str(int(value))
    return "" if value is None else _quoted(str(value))


def _floats(values: np.ndarray) -> list[str]:
    """repr of each float (shortest round-trip), NaN empty; repeated values (the cost columns hold
    a few distinct step times) formatted once."""
    unique, where = np.unique(values, return_inverse=True)
    # np.unique merges 0.0 and -0.0, which repr tells apart
    if len(unique) > len(values) // 2 or np.signbit(values[values == 0]).any():
        cells = list(map(float.__repr__, values.astype(np.float64).tolist()))
        for i in np.flatnonzero(np.isnan(values)).tolist():
            cells[i] = ""
        return cells
    texts = np.array(["" if math.isnan(u) else repr(u) for u in unique.astype(np.float64).tolist()],
                     dtype=object)
    return texts[where.reshape(-1)].tolist()


def _column(values: np.ndarray) -> list[str]:
    """A column's cells as text, by dtype: one numpy conversion per column instead of a Python
    call per cell (steps.csv cost ~15 µs a row through csv.writer)."""
    kind = values.dtype.kind
    if kind == "f":
        return _floats(values)
    if kind in "iu":
        return list(map(int.__repr__, values.tolist()))
    if kind == "b":
        return np.where(values, "true", "false").tolist()
    if kind == "U":
        cells = values.tolist()
        return list(map(_quoted, cells)) if any(c in "".join(set(cells)) for c in _QUOTED) else cells
    return [_cell(v) for v in values.tolist()]


def table_csv(columns: Mapping[str, np.ndarray]) -> str:
    """CSV with a header row; floats in shortest round-trip form, NaN as an empty cell. Written
    column by column, byte for byte what csv.writer (default dialect) wrote row by row: CRLF line
    ends, minimal quoting, a row of one empty cell quoted (tests/test_results.py compares them)."""
    return "".join(csv_parts(columns))


# Rows formatted at a time: a block's cells are Python strings (~50 bytes each), so a block of a
# step table (36 columns) holds ~8 MB however long the table is.
CSV_BLOCK_ROWS = 4096


def csv_parts(columns: Mapping[str, np.ndarray]) -> Iterator[str]:
    """table_csv's text in pieces (the header, then blocks of rows), so that a long table is
    written without being formatted whole, and a table on disk (sim/spill.py) is read a block at
    a time (a 1M-request run's steps.csv has ~8M rows)."""
    names = list(columns)
    yield ",".join(map(_quoted, names)) + "\r\n"
    for block in blocks(columns, names, CSV_BLOCK_ROWS):
        rows = list(map(",".join, zip(*(_column(np.asarray(block[n])) for n in names), strict=True)))
        if len(names) == 1:   # csv.writer quotes a row holding one empty cell, so that it reads back
            rows = ['""' if row == "" else row for row in rows]
        yield "\r\n".join(rows) + "\r\n"


def write_file(path: Path, content: str | bytes, option: str = "--out") -> Path:
    """Write one file atomically (staged_files): a temporary file beside it, then a rename, under
    its lock (output_lock; a no-op where the caller holds it). An existing file there is replaced
    only when psdsim can show it wrote it (check_output_file's rule). Returns `path` as given."""
    with staged_files([(option, Path(path), content)]):
        pass
    return Path(path)


def write_files(files: Sequence[tuple[str, Path, str | bytes]]) -> None:
    """Write several files as one (option, path, content): all or none (staged_files)."""
    with staged_files(files):
        pass


@dataclass
class _Staged:
    """One file staged beside its place: its temporary file, that of its record (None inside a
    claimed folder, whose marker records it), and the size and sha256 of what it holds."""

    real: Path
    tmp: Path
    record_tmp: Path | None
    entry: dict[str, Any]

    def discard(self) -> None:
        for tmp in (self.tmp, self.record_tmp):
            if tmp is not None:
                tmp.unlink(missing_ok=True)   # one already renamed into place is gone: a no-op


@contextlib.contextmanager
def staged_files(files: Sequence[tuple[str, Path, str | bytes]]) -> Iterator[None]:
    """Stage `files` (option, path, content) beside their places on entry, and rename every one
    into place only when the block ends without an error: a command with several outputs (a
    results folder written inside the block, a --plot folder that is a file, a full disk) leaves
    all of them written or none. Each place is locked for the block, and an existing file is
    replaced only when psdsim wrote it and it is unchanged; an OSError names its option."""
    staged: list[_Staged] = []
    with output_locks([(option, Path(path)) for option, path, _ in files]):
        try:
            for option, path, content in files:
                staged.append(_stage_file(option, Path(path), content))
            yield
            for item, (option, path, _) in zip(staged, files, strict=True):   # what appeared meanwhile
                _refuse_unless_ours(item.real, Path(path), option)
                if item.record_tmp is not None:
                    check_record_place(item.real, Path(path), option)
            for item, (option, path, _) in zip(staged, files, strict=True):
                with _naming(option, Path(path)):
                    _put_in_place(item)
        except BaseException:
            for item in staged:
                item.discard()
            raise


@contextlib.contextmanager
def _naming(option: str, path: Path) -> Iterator[None]:
    """An OSError in the block (a full disk, a read-only folder) as one line naming `option`."""
    try:
        yield
    except OSError as exc:
        raise ScenarioError(option, f"cannot write {str(path)!r} ({exc.strerror or exc})",
                            f"free some space, or choose a writable place with {option}") from None


def _stage_file(option: str, path: Path, content: str | bytes) -> _Staged:
    """`content` staged beside the place of `path`, with its record, once that place is found to
    be new or a file psdsim may replace."""
    real = _placed(path)
    if real.is_dir() and not real.is_symlink():   # a rename over a folder fails only once others are in place
        raise _refuse(option, path, "is a folder")
    _refuse_unless_ours(real, path, option)
    if _claimed_folder(real) is None:
        check_record_place(real, path, option)
    entry = _entry(content)
    with _naming(option, path):
        tmp = _stage(real, content)
        try:
            record_tmp = None if _claimed_folder(real) else _stage(
                record_file(real), json.dumps(entry) + "\n", _staging_prefix(real))
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    return _Staged(real, tmp, record_tmp, entry)


def _put_in_place(item: _Staged) -> None:
    """Rename a staged file and its record into place (or note it in its claimed folder's marker).
    The record goes first: a writer killed between the two renames leaves a new file absent, not
    present without a record (which a later run would refuse, as a resumed sweep's run files)."""
    if item.record_tmp is not None:
        os.replace(item.record_tmp, record_file(item.real))
    os.replace(item.tmp, item.real)
    if item.record_tmp is None:
        _record(item.real, item.entry)


def record_file(real: Path) -> Path:
    """The hidden record (size and sha256) of the single file `real` that psdsim wrote."""
    return real.parent / f".{real.name}{RECORD_SUFFIX}"


def _placed(path: Path) -> Path:
    """`path` with its folder resolved: where the write lands. Made through the spelling, the
    folders of `new/../notes.txt` would include a stray `new/`."""
    return path.parent.resolve() / path.name


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


def _stage(path: Path, content: str | bytes, prefix: str | None = None) -> Path:
    """`content` in a temporary file beside `path` (its folder made if missing), to rename over it;
    `prefix` names it as staging of another destination (a record, cleared with its file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=prefix or _staging_prefix(path), dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content.encode("utf-8") if isinstance(content, str) else content)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files: follow the user's umask
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


# ---------------------------------------------------------------------------------------------
# The lock on a destination, and what a killed writer left beside it

# The lock of a destination NAME is the file .NAME.psdsim-lock beside it: a folder that does not
# exist yet can hold nothing, and a lock inside a folder would go with it when it is replaced.
LOCK_SUFFIX = ".psdsim-lock"
# This process's mark in the names of its staging files and folders (.NAME.psdsim-MARK-XXXX). The
# lock file records it, so the next holder of the lock knows, beyond a name that a user's file
# could share, which entries a writer killed before it cleaned up (SIGKILL cannot be caught).
_MARK = secrets.token_hex(6)


@dataclass
class _Lock:
    """A lock this process holds: the open lock file (flock is released by the kernel when the
    process dies, so a killed writer never blocks the next) and the folders made to hold it."""

    fd: int
    path: Path
    made: list[Path] = field(default_factory=list)
    # folders under this lock that a command fills file by file (claim_folder): the command, and
    # the size and sha256 of each file it has written there, by name
    claimed: dict[Path, tuple[str, dict[str, Any]]] = field(default_factory=dict)


_HELD: dict[Path, _Lock] = {}
# The random tail mkstemp and mkdtemp put after a staging prefix (tempfile's 8 characters): a
# name that goes on (`.R.psdsim-MARK-abcd1234.mycopy`) is a copy, the user's, not staging.
_TEMP_NAME = "[a-z0-9_]{8}"


def _covering(real: Path) -> _Lock | None:
    """The lock this process holds on `real` or on a folder above it."""
    return next((_HELD[p] for p in (real, *real.parents) if p in _HELD), None)


def lock_file(real: Path) -> Path:
    """The lock file of the destination `real` (a resolved path)."""
    return real.parent / f".{real.name}{LOCK_SUFFIX}"


def _staging_prefix(real: Path) -> str:
    """The start of the name of a staging file or folder for `real`, beside it."""
    return f".{real.name}.psdsim-{_MARK}-"


@contextlib.contextmanager
def output_lock(path: Path, option: str = "--out") -> Iterator[Path]:
    """Hold the lock of the destination `path` (where it lands) for the block: a second psdsim
    writing there is refused at once, naming this process. Taken before the checks and the work,
    so that what was checked is what is replaced; held already (here or on a folder above), it is
    not taken twice. On entry, what a killed writer of the same place left is removed."""
    real = landing(Path(path), option)
    if fcntl is None or _covering(real) is not None:
        yield real
        return
    _check_umask(Path(path))
    with _sigterm_raises():
        lock = _acquire(real, Path(path), option)
        _HELD[real] = lock
        try:
            yield real
        finally:
            del _HELD[real]
            _release(lock)


@contextlib.contextmanager
def output_locks(outputs: Sequence[tuple[str, Path | None]]) -> Iterator[None]:
    """output_lock on each (option, path) whose path is given, outermost first: an output inside
    another's folder is then covered by that folder's lock, and no lock file lands in a results
    folder."""
    given = [(option, Path(path)) for option, path in outputs if path is not None]
    depth = {path: len(landing(path, option).parts) for option, path in given}
    with contextlib.ExitStack() as stack:
        for option, path in sorted(given, key=lambda item: depth[item[1]]):
            stack.enter_context(output_lock(path, option))
        yield


class Terminated(KeyboardInterrupt):
    """SIGTERM (or SIGHUP, what a closed terminal sends, or SIGQUIT) while psdsim writes, raised
    where the process is, as Ctrl-C raises KeyboardInterrupt: the staging is removed and the lock
    let go on the way out, and the CLI exits with the signal's conventional code, 128 + its number."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signal.Signals(signum).name)
        self.exit_code = 128 + signum


# The signals that end psdsim cleanly while it writes (those a platform lacks are skipped).
_ENDING_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP", "SIGQUIT")
                        if hasattr(signal, name))


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """While the first lock is held, SIGTERM, SIGHUP and SIGQUIT raise Terminated in this process
    (only the main thread may set a handler; a lock taken inside another one leaves them as they are)."""
    if _HELD or threading.current_thread() is not threading.main_thread():
        yield
        return
    owner = os.getpid()

    def terminate(signum: int, frame: Any) -> None:
        if os.getpid() != owner:   # a worker forked meanwhile: die as the signal would have it
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise Terminated(signum)

    previous = {signum: signal.signal(signum, terminate) for signum in _ENDING_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if handler is not None:
                signal.signal(signum, handler)


def _acquire(real: Path, given: Path, option: str) -> _Lock:
    _refuse_if_inside_a_locked_folder(real, given, option)
    made = _make_folders(real.parent, given, option)
    try:
        fd = _locked_fd(lock_file(real), given, option)
    except BaseException:
        _remove_empty(made)
        raise
    lock = _Lock(fd, lock_file(real), made)
    try:
        _clear_stale(real, _holder(fd).get("mark"))
        with _naming(option, given):   # a full disk has no room even for the lock's few bytes
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps({"pid": os.getpid(), "mark": _MARK}).encode() + b"\n", 0)
    except BaseException:
        _release(lock)
        raise
    return lock


def _refuse_if_inside_a_locked_folder(real: Path, given: Path, option: str) -> None:
    """Refuse a destination inside a folder another psdsim is writing: that writer replaces its
    folder whole, or checked it before it began, so anything written into it meanwhile would be
    lost or never checked. A lock file is probed with a shared lock, which fails while its
    holder has it."""
    for folder in real.parents:
        if not folder.name or _covering(folder) is not None:
            continue
        try:
            fd = open_own_file(lock_file(folder), LOCK_CAP)
        except NotOwnFile as exc:
            raise _foreign(option, lock_file(folder), "lock", given, str(exc)) from None
        except OSError:   # unreadable: nobody psdsim runs as here writes that folder
            continue
        if fd is None:   # none there: nobody writes that folder
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            pid = _holder(fd).get("pid", "unknown")
            raise ScenarioError(option, f"{str(given)!r} lies in {str(folder)!r}, which another psdsim "
                                f"(pid {pid}) is writing", f"wait for it to finish, or choose another "
                                f"{option} outside that folder") from None
        finally:
            os.close(fd)


def _locked_fd(path: Path, given: Path, option: str) -> int:
    """The lock file opened and locked. A holder removes its lock file before letting go, so a
    lock taken on a file no longer at `path` is dropped and taken again on the new one."""
    while True:
        try:
            # a link put in its place never makes psdsim write over what it points to
            fd = open_own_file(path, LOCK_CAP, os.O_RDWR | os.O_CREAT)
        except NotOwnFile as exc:
            raise _foreign(option, path, "lock", given, str(exc)) from None
        except OSError as exc:
            raise ScenarioError(option, f"cannot write {str(given)!r} ({exc.strerror or exc})",
                                f"choose a writable place with {option}") from None
        if fd is None:   # removed between its lstat and its opening: make it again
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            pid = _holder(fd).get("pid", "unknown")
            os.close(fd)
            raise ScenarioError(option, f"{str(given)!r} is being written by another psdsim (pid {pid})",
                                f"wait for it to finish, or choose another {option}") from None
        try:
            if os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                return _checked_lock(fd, path, given, option)
        except FileNotFoundError:
            pass
        os.close(fd)


def _checked_lock(fd: int, path: Path, given: Path, option: str) -> int:
    """`fd`, once its file is found to be empty (new) or a lock document a psdsim left: any other
    file at the lock's name is the user's, and is neither truncated nor removed."""
    try:
        doc = json.loads(os.pread(fd, LOCK_CAP, 0) or b"{}")
    except (OSError, ValueError):
        doc = None
    if isinstance(doc, dict) and set(doc) <= {"pid", "mark"}:
        return fd
    os.close(fd)
    raise _foreign(option, path, "lock", given, "is a file psdsim did not write")


def _foreign(option: str, path: Path, kept: str, given: Path, why: str) -> ScenarioError:
    """The refusal of the name where psdsim keeps the `kept` (lock, record) of `given`, when what
    is there is not one psdsim wrote."""
    return ScenarioError(option, f"{str(path)!r}, where psdsim keeps the {kept} of {str(given)!r}, {why}; "
                         "psdsim never deletes or overwrites what it did not write",
                         f"move that away yourself, or write elsewhere with {option}")


def _holder(fd: int) -> dict[str, Any]:
    """What the lock file says of its last holder ({} for a new or unreadable one)."""
    try:
        doc = json.loads(os.pread(fd, LOCK_CAP, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _release(lock: _Lock) -> None:
    """Remove the lock file, then let go of it (so no one locks a file about to vanish unseen),
    and the folders made for it if nothing was written into them."""
    with contextlib.suppress(OSError):
        lock.path.unlink()
    os.close(lock.fd)
    _remove_empty(lock.made)


def _make_folders(folder: Path, given: Path, option: str) -> list[Path]:
    """Make `folder` and its missing parents; return those made, deepest first."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _remove_empty(missing)
        raise ScenarioError(option, f"cannot write {str(given)!r} ({exc.strerror or exc})",
                            f"choose a writable place with {option}") from None
    return missing


def _remove_empty(folders: Iterable[Path]) -> None:
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()


def _clear_stale(real: Path, mark: Any) -> None:
    """Remove the staging files and folders of the writer whose mark the lock file held: it is
    gone (the lock was free) and left them only if it was killed. Only entries named exactly as
    its staging is named (its mark, then mkstemp's random tail, and nothing after it) are touched:
    beside `real`, and inside it (where a folder written file by file, as validate's and sweep's
    are, stages its files). A copy under a longer name is the user's."""
    if not isinstance(mark, str) or not re.fullmatch(r"[0-9a-f]{12}", mark):
        return
    stale = re.compile(rf"\..+\.psdsim-{mark}-{_TEMP_NAME}")
    mine = re.compile(rf"{re.escape(f'.{real.name}.psdsim-{mark}-')}{_TEMP_NAME}")
    beside = [e for e in real.parent.iterdir() if mine.fullmatch(e.name)]
    inside = [Path(top) / name for top, dirs, files in os.walk(real) for name in (*dirs, *files)
              if stale.fullmatch(name)] if real.is_dir() and not real.is_symlink() else []
    for entry in (*beside, *inside):
        _remove(entry)


def _remove(entry: Path) -> None:
    """Remove a staging file or folder of psdsim's, whatever permissions it was left with."""
    if entry.is_dir() and not entry.is_symlink():
        with contextlib.suppress(OSError):
            entry.chmod(0o700)
        for top, dirs, _ in os.walk(entry):   # top-down: each folder opened before it is entered
            for name in dirs:
                with contextlib.suppress(OSError):
                    os.chmod(os.path.join(top, name), 0o700)
        shutil.rmtree(entry, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            entry.unlink()


def summary_json(summary: Mapping[str, Any]) -> str:
    return json.dumps(summary, indent=2, allow_nan=False) + "\n"


def _refuse(option: str, out: Path, why: str, new: str = "folder") -> ScenarioError:
    """`new`: what the option names, a folder (--out) or a file (--trace, a figure)."""
    return ScenarioError(option, f"{str(out)!r} {why}; psdsim never deletes or overwrites what it did not "
                         "write", f"name a new {new} (or remove that one yourself)")


def _holds_working_directory(out: Path) -> bool:
    here, target = Path.cwd().resolve(), out.resolve()
    return here == target or target in here.parents


def _marker(out: Path) -> dict[str, Any] | None:
    """The marker of the folder `out`, or None where there is none psdsim could have written
    (absent, unreadable, a pipe, a link, not JSON, larger than MARKER_CAP)."""
    try:
        doc = json.loads(read_own_file(out / MARKER, MARKER_CAP) or b"")
    except (OSError, NotOwnFile, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("files"), list | str | dict) else None


def landing(path: Path, option: str) -> Path:
    """Where a write to `path` lands: the path with every link and `..` resolved as the system
    will once missing folders are made (`new/../notes.txt` is `notes.txt`, which exists even though
    `new/` does not). Checks look there, not at the spelling. A name the system cannot take (too
    long, a loop of links) is refused in one line."""
    try:
        path = Path(path)
        real = path.resolve()
        real.exists()   # raises for a name too long, which resolve() lets through
    except (OSError, RuntimeError, ValueError) as exc:   # RuntimeError: a loop of links (Python 3.11)
        fix = ("choose a folder you may search and write" if isinstance(exc, PermissionError)
               else "choose a shorter or plainer name")
        raise ScenarioError(option, f"cannot use {str(path)!r} ({path_trouble(exc)})", fix) from None
    blocker = next((p for p in real.parents if p.exists()), None)
    if blocker is not None and not blocker.is_dir():   # refused now, not after the work is done
        raise ScenarioError(option, f"cannot write {str(path)!r}: {str(blocker)!r} is a file, not a folder",
                            f"choose a path in a folder with {option}")
    return real


def check_results_folder(out_dir: Path, command: str, option: str = "--out") -> None:
    """Refuse (ScenarioError) unless `out_dir` is new, an empty folder, or a folder that `command`
    wrote itself and that holds nothing else: every file one its marker lists, with the size and
    sha256 recorded when it was written, and every folder one that holds such a file. Called before
    any work (under the destination's lock), so a refusal costs nothing."""
    given = Path(out_dir)
    out = landing(given, option)
    if _holds_working_directory(out):
        raise _refuse(option, given, "is the working directory or holds it")
    if given.is_symlink() or (out.exists() and not out.is_dir()):
        raise _refuse(option, given, "is an existing file")
    if out.exists():
        _check_contents(out, given, command, option)


def _check_contents(out: Path, given: Path, command: str, option: str) -> None:
    """check_results_folder's rule on the existing folder `out` (named `given` in a refusal)."""
    files, folders = _contents(out)
    if not files and not folders:
        return
    marker = _marker(out)
    if marker is None:
        raise _refuse(option, given, "is a folder psdsim did not write")
    if marker.get("command") != command:
        raise _refuse(option, given,
                      f"holds the results of `psdsim {marker.get('command')}`, not `{command}`")
    listed = marker["files"]
    if listed == INCREMENTAL:   # never emptied: only what it wrote, and may write again, must be intact
        written = marker.get("written") if isinstance(marker.get("written"), dict) else {}
        _refuse_changed(out, given, option, files, written)
        return
    if not isinstance(listed, dict):
        raise _refuse(option, given, "was written by an earlier psdsim whose marker records no sizes or "
                                     "hashes, so nothing proves which of its files are psdsim's")
    holding = {parent.as_posix() for name in listed for parent in Path(name).parents}
    _refuse_any(option, given, "files psdsim did not write", files - set(listed) - {MARKER})
    _refuse_changed(out, given, option, files, listed)
    _refuse_any(option, given, "folders psdsim did not make", {f"{n}/" for n in folders - holding})


def _refuse_any(option: str, out: Path, why: str, names: set[str]) -> None:
    if names:
        raise _refuse(option, out, f"holds {why} ({', '.join(sorted(names)[:3])})")


def _refuse_changed(out: Path, given: Path, option: str, files: set[str], record: Mapping[str, Any]) -> None:
    """Refuse the files present that `record` lists but that no longer hold what it recorded; one
    psdsim cannot read is named as such (it may be unchanged, but nothing shows it)."""
    changed = {name for name in files & set(record) if not _matches(out / name, record[name])}
    unreadable = {name for name in changed if not os.access(out / name, os.R_OK)}
    _refuse_any(option, given, "files psdsim cannot read, so nothing shows it wrote them", unreadable)
    _refuse_any(option, given, "files changed since psdsim wrote them", changed)


def _contents(out: Path) -> tuple[set[str], set[str]]:
    """The files (anything but a folder: a link to one included) and the folders under `out`, as
    names relative to it."""
    files: set[str] = set()
    folders: set[str] = set()
    for top, dirs, names in os.walk(out):
        here = Path(top)
        for name in dirs:
            (files if (here / name).is_symlink() else folders).add((here / name).relative_to(out).as_posix())
        files.update((here / name).relative_to(out).as_posix() for name in names)
    return files, folders


def _matches(path: Path, entry: Any) -> bool:
    """Whether `path` is a regular file holding what the marker's `entry` recorded."""
    if not (isinstance(entry, dict) and path.is_file() and not path.is_symlink()):
        return False
    if path.stat().st_size != entry.get("size"):
        return False
    digest = hashlib.sha256()
    try:
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    except OSError:   # unreadable: nothing proves it is psdsim's
        return False
    return digest.hexdigest() == entry.get("sha256")


def check_no_clash(outputs: Sequence[tuple[str, Path]], inputs: Sequence[Path | str] = ()) -> None:
    """Refuse (ScenarioError) two outputs (option, path) where one lands on or inside the other (a
    results folder is replaced whole: a --trace written into it would go with it), and an output
    that lands on an input or holds one: a profile read and then overwritten by the timeline of
    the run it priced, or a trace replaced by the profile fitted to it, would be lost, whatever
    its signature says (psdsim may write its own inputs)."""
    seen: list[tuple[Path, str]] = []
    sources = [(str(s), Path(s).resolve()) for s in inputs if s]
    for option, path in outputs:
        real = landing(path, option)
        for other, other_option in seen:
            if real == other or other in real.parents or real in other.parents:
                raise ScenarioError(option, f"{str(path)!r} is, holds or lies in where {other_option} writes",
                                    "give each output its own place")
        seen.append((real, option))
        for name, source in sources:
            if source == real or real in source.parents or (
                    real.exists() and source.exists() and os.path.samefile(source, real)):
                raise ScenarioError(option, f"{str(path)!r} would overwrite the input {name!r}",
                                    f"write {option} somewhere else")


def check_output_file(path: Path, option: str, signatures: tuple[bytes, ...] = (),
                      head: int | None = 4096) -> None:
    """Refuse (ScenarioError) a folder, a link or what is not a regular file as the single-file
    output `path`, and an existing file that psdsim cannot show it wrote: one with no record beside
    it (record_file), or one changed since (its size or sha256 differ from the record's). Inside a
    folder claimed for file-by-file writing, that folder's marker is the record. `signatures`
    admits files another program writes for psdsim (the engine's traces, written by torch), found
    by their first and last `head` bytes (None: the whole file)."""
    path = Path(path)
    real = landing(path, option)
    if path.is_symlink() or real.is_dir():
        raise _refuse(option, path, "is a folder or a link", "file")
    if real.exists() and not real.is_file():   # a pipe or a device: reading its head would block
        raise _refuse(option, path, "is not a regular file")
    if real.exists() and not (signatures and _signed(real, path, option, signatures, head)):
        _refuse_unless_ours(real, path, option)


def _signed(real: Path, path: Path, option: str, signatures: tuple[bytes, ...], head: int | None) -> bool:
    """Whether the file `real` holds one of `signatures` in its first or last `head` bytes."""
    try:
        with real.open("rb") as fh:   # head=None: the whole file (a signature written late)
            start = fh.read(-1 if head is None else head)
            if head is not None and fh.seek(0, os.SEEK_END) > head:
                fh.seek(max(head, fh.tell() - head))
                start += fh.read()
    except OSError as exc:
        raise ScenarioError(option, f"cannot read {str(path)!r} ({exc.strerror or exc})",
                            "choose another file") from None
    return any(signature in start for signature in signatures)


def _refuse_unless_ours(real: Path, path: Path, option: str) -> None:
    """Refuse to replace the file at `real` (if any) unless its record shows psdsim wrote it."""
    if not (real.exists() or real.is_symlink()):
        return
    why = _not_ours(real)
    if why is not None:
        raise ScenarioError(option, f"{str(path)!r} {why}; psdsim never deletes or overwrites what it "
                            "did not write", f"choose another file with {option} (or remove that one "
                            "yourself)")


def is_own_file(real: Path) -> bool:
    """Whether psdsim may replace or delete the existing file `real`: its record shows it wrote
    these very bytes."""
    return _not_ours(real) is None


def remove_own_file(real: Path) -> None:
    """Delete the file `real` and its record, if it is there and psdsim wrote it (is_own_file)."""
    if (real.exists() or real.is_symlink()) and is_own_file(real):
        real.unlink()
        record_file(real).unlink(missing_ok=True)


def _not_ours(real: Path) -> str | None:
    """Why the existing file `real` is not one psdsim may replace, or None when it is."""
    if real.is_symlink() or not real.is_file():
        return "is a link or not a regular file"
    claimed = _claimed_folder(real)
    if claimed is not None:   # its marker records it; what earlier versions wrote there recorded nothing
        entry = claimed[1].get(real.relative_to(claimed[0]).as_posix())
    else:
        try:
            data = read_own_file(record_file(real), RECORD_CAP)
        except NotOwnFile as exc:
            return f"has beside it a record {record_file(real).name!r} that {exc}"
        except OSError:
            data = b""
        if data is None:
            return ("is an existing file psdsim did not write (or wrote before it kept a record "
                    "of its files)")
        entry = _record_entry(data) or {}
    if entry is None or _matches(real, entry):
        return None
    if not os.access(real, os.R_OK):
        return "cannot be read, so nothing shows psdsim wrote it"
    return "has changed since psdsim wrote it"


def _record_entry(data: bytes) -> dict[str, Any] | None:
    """The size and sha256 a record's bytes hold, or None where they are not a psdsim record."""
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    if not (isinstance(doc, dict) and set(doc) == {"size", "sha256"} and isinstance(doc["size"], int)
            and isinstance(doc["sha256"], str) and re.fullmatch(r"[0-9a-f]{64}", doc["sha256"])):
        return None
    return doc


def check_record_place(real: Path, path: Path, option: str) -> None:
    """Refuse to write the record of `real` over what sits at its name unless it is a psdsim record
    (with its file present, _refuse_unless_ours has checked it describes that file): a note of the
    user's under that name, a link, a pipe or a folder stays as it is."""
    record = record_file(real)
    try:
        data = read_own_file(record, RECORD_CAP)
        why = None if data is None or _record_entry(data) is not None else "is not a record psdsim wrote"
    except NotOwnFile as exc:
        why = str(exc)
    except OSError as exc:
        why = f"cannot be read ({exc.strerror or exc})"
    if why is not None:
        raise _foreign(option, record, "record", path, why)


def _claimed_folder(real: Path) -> tuple[Path, dict[str, Any]] | None:
    """The folder claimed for file-by-file writing (claim_folder) that holds `real`, and the
    record of what was written there, or None."""
    lock = _covering(real)
    for folder, (_, written) in (lock.claimed.items() if lock is not None else ()):
        if folder in real.parents:
            return folder, written
    return None


def claim_folder(out_dir: Path, command: str, option: str = "--out") -> Path:
    """Make `out_dir` a folder that `command` fills file by file (under check_results_folder's rule),
    marked so that the same command may write into it again."""
    out_dir = Path(out_dir)
    with output_lock(out_dir, option) as real:
        check_results_folder(out_dir, command, option)
        try:
            real.mkdir(parents=True, exist_ok=True)   # no stray new/ for new/../dir
        except OSError as exc:
            raise ScenarioError(option, f"cannot write {str(out_dir)!r} ({exc.strerror or exc})",
                                "choose a writable folder") from None
        marker = _marker(real) or {}
        written = marker.get("written") if isinstance(marker.get("written"), dict) else {}
        lock = _covering(real)
        if lock is not None:
            lock.claimed[real] = (command, written)
        _write_claim(real, command, written)
    return out_dir


def _record(real: Path, entry: dict[str, Any]) -> None:
    """Note in the marker of a claimed folder holding `real` (just written) its size and sha256
    (`entry`), so that a later run can tell it from a file the user has edited since."""
    lock = _covering(real)
    for folder, (command, written) in (lock.claimed.items() if lock is not None else ()):
        if folder in real.parents and real != folder / MARKER:
            written[real.relative_to(folder).as_posix()] = entry
            _write_claim(folder, command, written)


def _entry(content: str | bytes) -> dict[str, Any]:
    data = content.encode("utf-8") if isinstance(content, str) else content
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _write_claim(folder: Path, command: str, written: Mapping[str, Any]) -> None:
    doc = {"command": command, "files": INCREMENTAL, "written": dict(sorted(written.items()))}
    os.replace(_stage(folder / MARKER, json.dumps(doc, indent=1) + "\n"), folder / MARKER)


def write_folder(out_dir: Path, files: Mapping[str, str | bytes | Mapping[str, np.ndarray]],
                 command: str, option: str = "--out") -> Path:
    """Atomically create (or replace, under check_results_folder's rule) `out_dir` holding `files`:
    text, bytes, or a table (CSV); names may have folders (`figures/a.png`). The marker file
    records `command` and each file's size and sha256, so that the same command may replace the
    folder later, as long as nobody has changed it."""
    with output_lock(out_dir, option) as out:
        check_results_folder(out_dir, command, option)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=_staging_prefix(out), dir=out.parent))
        try:
            written = {name: _write_recorded(tmp / name, content) for name, content in sorted(files.items())}
            marker = {"command": command, "files": written}
            (tmp / MARKER).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
            _follow_umask(tmp)
            _swap_in(tmp, out, lambda aside: _check_contents(aside, Path(out_dir), command, option))
        except BaseException:
            _remove(tmp)
            raise
    return out


def _write_recorded(path: Path, content: str | bytes | Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Write `content` (text, bytes or a table as CSV) to `path`; return its size and sha256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pieces: Iterable[str | bytes] = (content,) if isinstance(content, str | bytes) else csv_parts(content)
    digest, size = hashlib.sha256(), 0
    with path.open("wb") as fh:
        for piece in pieces:
            data = piece.encode("utf-8") if isinstance(piece, str) else piece
            fh.write(data)
            digest.update(data)
            size += len(data)
    return {"size": size, "sha256": digest.hexdigest()}


def _swap_in(tmp: Path, out: Path, check: Callable[[Path], None]) -> None:
    """Rename the staged folder `tmp` to `out`, setting aside the folder it replaces until the new
    one is in place: a rename that fails (a read-only folder) puts the old one back and leaves
    nothing beside it. The folder set aside is checked again (`check`, which raises) before it is
    deleted: what appeared in it, or made it, while the new one was staged is put back, untouched."""
    if not out.exists():
        os.replace(tmp, out)   # fails, rather than replaces, where a folder with files appeared meanwhile
        return
    aside = Path(tempfile.mkdtemp(prefix=_staging_prefix(out), dir=out.parent))
    try:
        os.replace(out, aside / out.name)
    except BaseException:
        aside.rmdir()
        raise
    try:
        check(aside / out.name)
        os.replace(tmp, out)
    except BaseException:
        os.replace(aside / out.name, out)
        aside.rmdir()
        raise
    _remove(aside)


def _check_umask(given: Path) -> None:
    """Refuse, before any work, a umask that takes the owner's write or search permission off
    what psdsim makes: its staging folders could not be filled, renamed or replaced."""
    mask = _umask()
    if mask & 0o300:
        raise ScenarioError("umask", f"{mask:03o} takes your own write or search permission off the files "
                            f"and folders psdsim makes, so it could not write {str(given)!r}",
                            "run psdsim under a umask that keeps them, e.g. `umask 022`")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _follow_umask(folder: Path) -> None:
    """mkdtemp makes 0700 folders; give the results the permissions the user's umask asks for."""
    mask = _umask()
    folder.chmod(0o777 & ~mask)
    for p in folder.rglob("*"):
        p.chmod((0o777 if p.is_dir() else 0o666) & ~mask)


def result_files(result: Any, plots: bool = False) -> dict[str, str | bytes | Mapping[str, np.ndarray]]:
    """The standard files of one simulated run (a sim.run.Result); `plots` adds occupancy.png."""
    files: dict[str, str | bytes | Mapping[str, np.ndarray]] = {
        "summary.json": summary_json(result.summary),
        "scenario.toml": scenario_to_toml(result.scenario),
    }
    if result.fits:
        files["steps.csv"] = result.steps
        files["requests.csv"] = result.requests
        if plots:
            files["occupancy.png"] = occupancy_png(result)
    return files


def write_result(result: Any, out_dir: Path, plots: bool = False) -> Path:
    """The standard folder of one simulated run, as `psdsim run` writes it."""
    return write_folder(out_dir, result_files(result, plots), "run")
