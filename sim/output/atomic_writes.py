"""Single files written atomically: each staged in a temporary file beside its place, with its
record, and renamed into place only once every file of the command is staged (staged_files), so
that a command's outputs are all written or none; and the folders a command fills file by file
(claim_folder), whose marker records each file as it is written there."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from psdsim.sim.errors import ScenarioError
from psdsim.sim.output.locks import claimed_folder, covering_lock, output_lock, output_locks, staging_prefix
from psdsim.sim.output.overwrite_guard import (
    check_record_place,
    check_results_folder,
    refusal,
    refuse_unless_ours,
)
from psdsim.sim.output.own_files import INCREMENTAL, MARKER, folder_marker, record_file
from psdsim.sim.output.places import current_umask, naming_failures


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
                refuse_unless_ours(item.real, Path(path), option)
                if item.record_tmp is not None:
                    check_record_place(item.real, Path(path), option)
            for item, (option, path, _) in zip(staged, files, strict=True):
                with naming_failures(option, Path(path)):
                    _put_in_place(item)
        except BaseException:
            for item in staged:
                item.discard()
            raise


def _stage_file(option: str, path: Path, content: str | bytes) -> _Staged:
    """`content` staged beside the place of `path`, with its record, once that place is found to
    be new or a file psdsim may replace."""
    real = _placed(path)
    if real.is_dir() and not real.is_symlink():   # a rename over a folder fails only once others are in place
        raise refusal(option, path, "is a folder")
    refuse_unless_ours(real, path, option)
    if claimed_folder(real) is None:
        check_record_place(real, path, option)
    entry = _entry(content)
    with naming_failures(option, path):
        tmp = _stage(real, content)
        try:
            record_tmp = None if claimed_folder(real) else _stage(
                record_file(real), json.dumps(entry) + "\n", staging_prefix(real))
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


def _placed(path: Path) -> Path:
    """`path` with its folder resolved: where the write lands. Made through the spelling, the
    folders of `new/../notes.txt` would include a stray `new/`."""
    return path.parent.resolve() / path.name


def _stage(path: Path, content: str | bytes, prefix: str | None = None) -> Path:
    """`content` in a temporary file beside `path` (its folder made if missing), to rename over it;
    `prefix` names it as staging of another destination (a record, cleared with its file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=prefix or staging_prefix(path), dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content.encode("utf-8") if isinstance(content, str) else content)
        os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp makes 0600 files: follow the user's umask
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


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
        marker = folder_marker(real) or {}
        written = marker.get("written") if isinstance(marker.get("written"), dict) else {}
        lock = covering_lock(real)
        if lock is not None:
            lock.claimed[real] = (command, written)
        _write_claim(real, command, written)
    return out_dir


def _record(real: Path, entry: dict[str, Any]) -> None:
    """Note in the marker of a claimed folder holding `real` (just written) its size and sha256
    (`entry`), so that a later run can tell it from a file the user has edited since."""
    lock = covering_lock(real)
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
