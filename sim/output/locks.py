"""One writer per destination: each write holds a lock on its destination (output_lock) from its
checks to its last rename, so that two psdsim processes never write one place at once.

The lock file records the holder's pid and the mark on its staging names, which is how the next
writer knows what a killed one left, and removes it. While a lock is held, SIGTERM, SIGHUP and
SIGQUIT raise Terminated, so that the staging is removed on the way out as it is after Ctrl-C. A
held lock also carries the folders a command fills file by file under it (claimed_folder)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psdsim.sim.errors import ScenarioError
from psdsim.sim.output.own_files import LOCK_CAP, NotOwnFile, foreign_refusal, open_own_file
from psdsim.sim.output.places import check_umask, landing, naming_failures

try:
    import fcntl
except ImportError:   # not POSIX: writes are not locked
    fcntl = None  # type: ignore[assignment]


# The lock of a destination NAME is the file .NAME.psdsim-lock beside it: a folder that does not
# exist yet can hold nothing, and a lock inside a folder would go with it when it is replaced.
LOCK_SUFFIX = ".psdsim-lock"
# This process's mark in the names of its staging files and folders (.NAME.psdsim-MARK-XXXX). The
# lock file records it, so the next holder of the lock knows, beyond a name that a user's file
# could share, which entries a writer killed before it cleaned up (SIGKILL cannot be caught).
_MARK = secrets.token_hex(6)


@dataclass
class HeldLock:
    """A lock this process holds: the open lock file (flock is released by the kernel when the
    process dies, so a killed writer never blocks the next) and the folders made to hold it."""

    fd: int
    path: Path
    made: list[Path] = field(default_factory=list)
    # folders under this lock that a command fills file by file (claim_folder): the command, and
    # the size and sha256 of each file it has written there, by name
    claimed: dict[Path, tuple[str, dict[str, Any]]] = field(default_factory=dict)


_HELD: dict[Path, HeldLock] = {}
# The random tail mkstemp and mkdtemp put after a staging prefix (tempfile's 8 characters): a
# name that goes on (`.R.psdsim-MARK-abcd1234.mycopy`) is a copy, the user's, not staging.
_TEMP_NAME = "[a-z0-9_]{8}"


def covering_lock(real: Path) -> HeldLock | None:
    """The lock this process holds on `real` or on a folder above it."""
    return next((_HELD[p] for p in (real, *real.parents) if p in _HELD), None)


def claimed_folder(real: Path) -> tuple[Path, dict[str, Any]] | None:
    """The folder claimed for file-by-file writing (claim_folder) that holds `real`, and the
    record of what was written there, or None."""
    lock = covering_lock(real)
    for folder, (_, written) in (lock.claimed.items() if lock is not None else ()):
        if folder in real.parents:
            return folder, written
    return None


def lock_file(real: Path) -> Path:
    """The lock file of the destination `real` (a resolved path)."""
    return real.parent / f".{real.name}{LOCK_SUFFIX}"


def staging_prefix(real: Path) -> str:
    """The start of the name of a staging file or folder for `real`, beside it."""
    return f".{real.name}.psdsim-{_MARK}-"


NAME_BYTES = 255   # the most a file or folder name may hold (NAME_MAX on Linux and macOS)
# The longest destination name whose staging names (staging_prefix, then tempfile's 8 characters)
# still fit in NAME_BYTES.
MAX_DESTINATION_NAME = NAME_BYTES - len(staging_prefix(Path("_")).encode()) + 1 - 8


def fitting_name(name: str, tail: Sequence[str] = ()) -> str:
    """`name` and `tail` joined by '-' as a default destination name, `name` cut short (between
    characters) where the whole would pass MAX_DESTINATION_NAME. A cut name carries a hash of the
    whole `name`, so two long names that differ only past the cut keep their own folders."""
    whole = "-".join([name, *tail])
    if len(whole.encode()) <= MAX_DESTINATION_NAME:
        return whole
    rest = [hashlib.sha256(name.encode()).hexdigest()[:8], *tail]
    room = MAX_DESTINATION_NAME - len("-".join(["", *rest]).encode())
    return "-".join([name.encode()[:room].decode(errors="ignore"), *rest])


@contextlib.contextmanager
def output_lock(path: Path, option: str = "--out") -> Iterator[Path]:
    """Hold the lock of the destination `path` (where it lands) for the block: a second psdsim
    writing there is refused at once, naming this process. Taken before the checks and the work,
    so that what was checked is what is replaced; held already (here or on a folder above), it is
    not taken twice. On entry, what a killed writer of the same place left is removed."""
    real = landing(Path(path), option)
    if fcntl is None or covering_lock(real) is not None:
        yield real
        return
    check_umask(Path(path))
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


def _acquire(real: Path, given: Path, option: str) -> HeldLock:
    _refuse_if_inside_a_locked_folder(real, given, option)
    made = _make_folders(real.parent, given, option)
    try:
        fd = _locked_fd(lock_file(real), given, option)
    except BaseException:
        _remove_empty(made)
        raise
    lock = HeldLock(fd, lock_file(real), made)
    try:
        _clear_stale(real, _holder(fd).get("mark"))
        with naming_failures(option, given):   # a full disk has no room even for the lock's few bytes
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
        if not folder.name or covering_lock(folder) is not None:
            continue
        try:
            fd = open_own_file(lock_file(folder), LOCK_CAP)
        except NotOwnFile as exc:
            raise foreign_refusal(option, lock_file(folder), "lock", given, str(exc)) from None
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
            raise foreign_refusal(option, path, "lock", given, str(exc)) from None
        except OSError as exc:
            raise ScenarioError(option, f"cannot write {str(given)!r} ({exc.strerror or exc})",
                                f"choose a writable place with {option}") from None
        assert fd is not None   # O_CREAT: made if it is gone, or an OSError above
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
    raise foreign_refusal(option, path, "lock", given, "is a file psdsim did not write")


def _holder(fd: int) -> dict[str, Any]:
    """What the lock file says of its last holder ({} for a new or unreadable one)."""
    try:
        doc = json.loads(os.pread(fd, LOCK_CAP, 0) or b"{}")
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _release(lock: HeldLock) -> None:
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
        remove_staging(entry)


def remove_staging(entry: Path) -> None:
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
