"""psdsim never deletes or overwrites what it did not write: the checks that refuse, before any
work is written, a place it may not replace.

A later run of the same command may replace a results folder only while every file in it is one
its marker lists, byte for byte, and every folder in it holds one of them: an existing file, a
file or folder the user added or a file the user edited, the working directory or a folder above
it are refused. A single file is replaced only while it still holds the bytes its record (or the
marker of the folder claimed for it) describes, and no output may land on another output or on an
input (check_no_clash)."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from psdsim.sim.errors import ScenarioError
from psdsim.sim.output.locks import claimed_folder
from psdsim.sim.output.own_files import (
    INCREMENTAL,
    MARKER,
    RECORD_CAP,
    NotOwnFile,
    folder_marker,
    foreign_refusal,
    read_own_file,
    record_file,
)
from psdsim.sim.output.places import landing


def check_results_folder(out_dir: Path, command: str, option: str = "--out") -> None:
    """Refuse (ScenarioError) unless `out_dir` is new, an empty folder, or a folder that `command`
    wrote itself and that holds nothing else: every file one its marker lists, with the size and
    sha256 recorded when it was written, and every folder one that holds such a file. Called before
    any work (under the destination's lock), so a refusal costs nothing."""
    given = Path(out_dir)
    out = landing(given, option)
    if _holds_working_directory(out):
        raise refusal(option, given, "is the working directory or holds it")
    if given.is_symlink() or (out.exists() and not out.is_dir()):
        raise refusal(option, given, "is an existing file")
    if out.exists():
        check_contents(out, given, command, option)


def _holds_working_directory(out: Path) -> bool:
    here, target = Path.cwd().resolve(), out.resolve()
    return here == target or target in here.parents


def check_contents(out: Path, given: Path, command: str, option: str) -> None:
    """check_results_folder's rule on the existing folder `out` (named `given` in a refusal)."""
    files, folders = _contents(out)
    if not files and not folders:
        return
    marker = folder_marker(out)
    if marker is None:
        raise refusal(option, given, "is a folder psdsim did not write")
    if marker.get("command") != command:
        raise refusal(option, given,
                      f"holds the results of `psdsim {marker.get('command')}`, not `{command}`")
    listed = marker["files"]
    if listed == INCREMENTAL:   # never emptied: only what it wrote, and may write again, must be intact
        written = marker.get("written") if isinstance(marker.get("written"), dict) else {}
        _refuse_changed(out, given, option, files, written)
        return
    if not isinstance(listed, dict):
        raise refusal(option, given, "was written by an earlier psdsim whose marker records no sizes or "
                                     "hashes, so nothing proves which of its files are psdsim's")
    holding = {parent.as_posix() for name in listed for parent in Path(name).parents}
    _refuse_any(option, given, "files psdsim did not write", files - set(listed) - {MARKER})
    _refuse_changed(out, given, option, files, listed)
    _refuse_any(option, given, "folders psdsim did not make", {f"{n}/" for n in folders - holding})


def _refuse_any(option: str, out: Path, why: str, names: set[str]) -> None:
    if names:
        raise refusal(option, out, f"holds {why} ({', '.join(sorted(names)[:3])})")


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
        raise refusal(option, path, "is a folder or a link", "file")
    if real.exists() and not real.is_file():   # a pipe or a device: reading its head would block
        raise refusal(option, path, "is not a regular file")
    if real.exists() and not (signatures and _signed(real, path, option, signatures, head)):
        refuse_unless_ours(real, path, option)


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


def refuse_unless_ours(real: Path, path: Path, option: str) -> None:
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
    claimed = claimed_folder(real)
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
    (with its file present, refuse_unless_ours has checked it describes that file): a note of the
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
        raise foreign_refusal(option, record, "record", path, why)


def refusal(option: str, out: Path, why: str, new: str = "folder") -> ScenarioError:
    """`new`: what the option names, a folder (--out) or a file (--trace, a figure)."""
    return ScenarioError(option, f"{str(out)!r} {why}; psdsim never deletes or overwrites what it did not "
                         "write", f"name a new {new} (or remove that one yourself)")
