"""Writing a run's results folder: summary.json, steps.csv, requests.csv, scenario.toml.

Everything is written into a temporary folder beside the destination and renamed into place,
so a results folder is either complete or absent: an interrupted run leaves nothing half-written.

psdsim never deletes or overwrites what it did not write. A results folder carries a marker file
(MARKER: the command that wrote it and the files it holds); a later run of the same command may
replace that folder, and nothing else: an existing file, a folder holding anything the marker does
not list, the working directory or a folder above it are refused before any work is written.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from psdsim.sim.errors import ScenarioError
from psdsim.sim.output.plots import occupancy_png
from psdsim.sim.scenario import scenario_to_toml
from psdsim.sim.spill import blocks

MARKER = ".psdsim-results.json"
# The bytes by which psdsim recognises a single file it wrote, near its start: a profile's format
# key, a timeline's psdsim_version, the creator metadata of a PNG, SVG or PDF figure, validate's
# JUnit suite. Such a file may be replaced by a later run; any other may not (a user's file that
# merely mentions psdsim is not one of ours).
OWN_FILE_SIGNATURES = (b'"format": "psdsim-profile"', b'{"otherData":{"psdsim_version"',
                       b"Software\x00psdsim", b"<dc:title>psdsim</dc:title>", b"/Creator (psdsim)",
                       b'<testsuite name="psdsim validate"')
# The marker's file list of a folder a command fills file by file and never empties (validate):
# the same command may write into it again, overwriting only the names it writes.
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
    call per cell (issue #15.3: steps.csv cost ~15 µs a row through csv.writer)."""
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
    a time (issue #14: a 1M-request run's steps.csv has ~8M rows)."""
    names = list(columns)
    yield ",".join(map(_quoted, names)) + "\r\n"
    for block in blocks(columns, names, CSV_BLOCK_ROWS):
        rows = list(map(",".join, zip(*(_column(np.asarray(block[n])) for n in names), strict=True)))
        if len(names) == 1:   # csv.writer quotes a row holding one empty cell, so that it reads back
            rows = ['""' if row == "" else row for row in rows]
        yield "\r\n".join(rows) + "\r\n"


def write_file(path: Path, content: str | bytes) -> Path:
    """Write one file atomically: a temporary file beside it, then a rename. Returns `path` as
    given."""
    path = Path(path)
    real = _placed(path)
    tmp = _stage(real, content)
    try:
        os.replace(tmp, real)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_files(files: Sequence[tuple[str, Path, str | bytes]]) -> None:
    """Write several files as one (option, path, content): all are staged beside their places
    first and renamed into place only once every one is staged, so a file that cannot be written
    (a --plot folder that is a file) leaves none of them written. An OSError names its option."""
    staged: list[tuple[Path, Path]] = []
    try:
        for option, path, content in files:
            if Path(path).is_dir():   # a rename over a folder fails only once others are in place
                raise _refuse(option, Path(path), "is a folder")
            try:
                real = _placed(Path(path))
                staged.append((_stage(real, content), real))
            except OSError as exc:
                raise ScenarioError(option, f"cannot write {str(path)!r} ({exc.strerror or exc})",
                                    f"choose a writable file with {option} FILE") from None
        for tmp, path in staged:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)   # a temporary already renamed into place is gone: a no-op
        raise


def _placed(path: Path) -> Path:
    """`path` with its folder resolved: where the write lands. Made through the spelling, the
    folders of `new/../notes.txt` would include a stray `new/`."""
    return path.parent.resolve() / path.name


def _stage(path: Path, content: str | bytes) -> Path:
    """`content` in a temporary file beside `path` (its folder made if missing), to rename over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content.encode("utf-8") if isinstance(content, str) else content)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files: follow the user's umask
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def summary_json(summary: Mapping[str, Any]) -> str:
    return json.dumps(summary, indent=2, allow_nan=False) + "\n"


def _refuse(option: str, out: Path, why: str) -> ScenarioError:
    return ScenarioError(option, f"{str(out)!r} {why}; psdsim never deletes or overwrites what it did not "
                         "write", "name a new folder (or remove that one yourself)")


def _holds_working_directory(out: Path) -> bool:
    here, target = Path.cwd().resolve(), out.resolve()
    return here == target or target in here.parents


def _marker(out: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads((out / MARKER).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("files"), list | str) else None


def landing(path: Path, option: str) -> Path:
    """Where a write to `path` lands: the path with every link and `..` resolved as the system
    will once missing folders are made (`new/../notes.txt` is `notes.txt`, which exists even though
    `new/` does not). Checks look there, not at the spelling. A name the system cannot take (too
    long, a loop of links) is refused in one line."""
    try:
        path = Path(path)
        real = path.resolve()
        real.exists()   # raises for a name too long, which resolve() lets through
    except (OSError, RuntimeError) as exc:   # RuntimeError: a loop of links (Python 3.11)
        raise ScenarioError(option, f"cannot use {str(path)!r} ({getattr(exc, 'strerror', None) or exc})",
                            "choose a shorter or plainer name") from None
    blocker = next((p for p in real.parents if p.exists()), None)
    if blocker is not None and not blocker.is_dir():   # refused now, not after the work is done
        raise ScenarioError(option, f"cannot write {str(path)!r}: {str(blocker)!r} is a file, not a folder",
                            f"choose a path in a folder with {option}")
    return real


def check_results_folder(out_dir: Path, command: str, option: str = "--out") -> None:
    """Refuse (ScenarioError) unless `out_dir` is new, an empty folder, or a folder that `command`
    wrote itself and that holds nothing else. Called before any work, so a refusal costs nothing."""
    given = Path(out_dir)
    out = landing(given, option)
    if _holds_working_directory(out):
        raise _refuse(option, given, "is the working directory or holds it")
    if given.is_symlink() or (out.exists() and not out.is_dir()):
        raise _refuse(option, given, "is an existing file")
    if not out.exists():
        return
    present = {p.relative_to(out).as_posix() for p in out.rglob("*") if not p.is_dir()}
    if not present:
        return
    marker = _marker(out)
    if marker is None:
        raise _refuse(option, given, "is a folder psdsim did not write")
    if marker.get("command") != command:
        raise _refuse(option, given,
                      f"holds the results of `psdsim {marker.get('command')}`, not `{command}`")
    if marker["files"] == INCREMENTAL:
        return
    foreign = sorted(present - set(marker["files"]) - {MARKER})
    if foreign:
        raise _refuse(option, given, f"holds files psdsim did not write ({', '.join(foreign[:3])})")


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


def check_output_file(path: Path, option: str, signatures: tuple[bytes, ...] = OWN_FILE_SIGNATURES,
                      head: int | None = 4096) -> None:
    """Refuse (ScenarioError) to overwrite an existing file that psdsim did not write (its first
    `head` bytes hold none of `signatures`: by default psdsim's own; a CSV passes its header row),
    a folder, a link, or what is not a regular file."""
    path = Path(path)
    real = landing(path, option)
    if path.is_symlink() or real.is_dir():
        raise _refuse(option, path, "is a folder or a link")
    if real.exists() and not real.is_file():   # a pipe or a device: reading its head would block
        raise _refuse(option, path, "is not a regular file")
    if real.exists():
        try:
            with real.open("rb") as fh:   # head=None: the whole file (a signature written late)
                start = fh.read(-1 if head is None else head)
        except OSError as exc:
            raise ScenarioError(option, f"cannot read {str(path)!r} ({exc.strerror or exc})",
                                "choose another file") from None
        if not any(signature in start for signature in signatures):
            raise _refuse(option, path, "is an existing file psdsim did not write")


def claim_folder(out_dir: Path, command: str, option: str = "--out") -> Path:
    """Make `out_dir` a folder that `command` fills file by file (under check_results_folder's rule),
    marked so that the same command may write into it again."""
    out_dir = Path(out_dir)
    check_results_folder(out_dir, command, option)
    try:
        landing(out_dir, option).mkdir(parents=True, exist_ok=True)   # no stray new/ for new/../dir
    except OSError as exc:
        raise ScenarioError(option, f"cannot write {str(out_dir)!r} ({exc.strerror or exc})",
                            "choose a writable folder") from None
    write_file(out_dir / MARKER, json.dumps({"command": command, "files": INCREMENTAL}, indent=1) + "\n")
    return out_dir


def write_folder(out_dir: Path, files: Mapping[str, str | bytes | Mapping[str, np.ndarray]],
                 command: str, option: str = "--out") -> Path:
    """Atomically create (or replace, under check_results_folder's rule) `out_dir` holding `files`:
    text, bytes, or a table (CSV); names may have folders (`figures/a.png`). The marker file
    records `command` and the names, so that the same command may replace the folder later."""
    check_results_folder(out_dir, command, option)
    out_dir = landing(out_dir, option)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        for name, content in files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, str):
                (tmp / name).write_text(content, encoding="utf-8")
            elif isinstance(content, bytes):
                (tmp / name).write_bytes(content)
            else:
                with (tmp / name).open("w", encoding="utf-8") as fh:
                    fh.writelines(csv_parts(content))
        marker = {"command": command, "files": sorted(files)}
        (tmp / MARKER).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
        _follow_umask(tmp)
        if out_dir.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old.", dir=out_dir.parent))
            os.replace(out_dir, old / out_dir.name)
            os.replace(tmp, out_dir)
            shutil.rmtree(old)
        else:
            os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


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
