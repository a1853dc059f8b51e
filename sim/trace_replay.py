"""Request traces: rows of arrival time, prompt tokens, output tokens and acceptance, in psdsim's
own CSV or JSONL or a public format recognised by its columns (sim/trace_formats.py).

psdsim's own columns (extra columns are ignored): `arrival_s` (seconds, in [0, 1e9]: the
simulated clock starts at 0 and resolves a tenth of a microsecond up to 1e9 s,
sim/scenario_values.py MAX_SPAN_S), `prompt_tokens` (>= 1), `output_tokens` (>= 1), prompt +
output at most max_model_len, and optionally `acceptance` (per-token acceptance in (0, 1 - 1e-9], the highest
rate the acceptance model takes as given; rows without it draw from the scenario's distribution).
A public format's arrivals count from its earliest request. A Replay then keeps a window of the
trace's clock and replays it faster or slower. A malformed row is reported with its line (or
request) number and field, as a ScenarioError naming `trace`; no value is clamped. A CSV header
may start with a byte-order mark and space its names (as spreadsheets write it); a column or JSON
key given twice is refused, since either reader would keep only the last. Rows are replayed in
arrival order (stable for ties).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from psdsim.sim.acceptance import MAX_ACCEPTANCE
from psdsim.sim.documents import DuplicateKey, duplicate_key_error, load_json, parse_document
from psdsim.sim.errors import ScenarioError
from psdsim.sim.numbers import finite, number, shown
from psdsim.sim.scenario import MAX_SPAN_S, Scenario, path_field_file
from psdsim.sim.trace_formats import (
    BENCH_KEYS,
    NATIVE,
    VLLM_BENCH,
    TraceFormat,
    bench_rows,
    closest,
    known_headers,
    utc_offset,
)

REQUIRED = NATIVE.columns
Rows = list[tuple[str, dict[str, Any]]]   # (where in the file: "line 3", "request 2"; the row)


@dataclass(frozen=True)
class Trace:
    arrival_s: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray
    acceptance: np.ndarray  # NaN where the row gives none
    notes: tuple[str, ...] = ()   # what a run of it should say about how it was read


@dataclass(frozen=True)
class Replay:
    """Which stretch of a trace replays, and how fast: the rows arriving in [start_s, start_s +
    duration_s) of the trace's clock (to its end when duration_s is None), each at (arrival -
    start_s) / speedup, so a speedup of 2 offers the recorded traffic at twice its rate."""

    speedup: float = 1.0
    start_s: float = 0.0
    duration_s: float | None = None

    @property
    def whole(self) -> bool:
        """Every row at its recorded time: arrivals are then replayed untouched, bit for bit."""
        return self.speedup == 1.0 and self.start_s == 0.0 and self.duration_s is None

    def keeps(self, arrival: float) -> bool:
        end = math.inf if self.duration_s is None else self.start_s + self.duration_s
        return self.start_s <= arrival < end

    def time(self, arrival: float) -> float:
        return arrival if self.whole else (arrival - self.start_s) / self.speedup


def _fail(path: Path, where: str, field: str, problem: str, fix: str = NATIVE.fix) -> ScenarioError:
    return ScenarioError("trace", f"{path.name} {where}: field {field!r}: {problem}", fix)


def _number(path: Path, where: str, row: dict[str, Any], field: str, *, integer: bool,
            fix: str = NATIVE.fix) -> float:
    if field not in row or row[field] in ("", None):
        raise _fail(path, where, field, "missing", f"give {field} on every row")
    raw = row[field]
    value = _cell_value(raw)
    if value is None and not isinstance(raw, int | float):   # bools are ints: refused below
        raise _fail(path, where, field, f"not a number: {shown(raw)}", fix)
    if value is None or not math.isfinite(value) or (integer and value != int(value)):
        kind = "an integer" if integer else "a finite number"
        raise _fail(path, where, field, f"must be {kind}, got {shown(raw)}", fix)
    return value


def _cell_value(raw: Any) -> float | None:
    """A cell as a float through the shared number readers: text as a user typed it (ASCII digits
    only; a text past a float's range reads as inf), JSON numbers only when finite and no bool (an
    integer past a float's range, which JSON allows, is None, not an OverflowError)."""
    if isinstance(raw, str):
        try:
            return number(raw)
        except ValueError:
            return None
    return finite(raw)


def _tokens(count: float) -> str:
    """A token count as a message shows it: whole, or in e-notation past 1e15 (a count of hundreds
    of digits, which JSON allows, would swamp the line)."""
    return f"{count:.0f}" if count < 1e15 else f"{count:.3g}"


def _text(path: Path) -> str:
    """The trace's text; every way it cannot be read (a folder, no permission, not UTF-8 text)
    is one ScenarioError naming `trace`."""
    what = "give a JSONL or CSV request trace (a UTF-8 text file you can read)"
    path_field_file("trace", path)
    try:
        return path.read_text(encoding="utf-8-sig")   # a spreadsheet's byte-order mark is no column
    except UnicodeDecodeError:
        raise ScenarioError("trace", f"{path.name} is not UTF-8 text (a binary file?)", what) from None
    except OSError as exc:
        raise ScenarioError("trace", f"cannot read {str(path)!r} ({exc.strerror or exc})", what) from None


def _header(path: Path, names: list[str]) -> list[str]:
    """The CSV header's column names without the spaces around them (`a, b` as some tools write
    it); a column named twice is refused, since DictReader would silently keep the last cell."""
    names = [name.strip() for name in names]
    twice = next((name for name in names if names.count(name) > 1), None)
    if twice is not None:
        raise _fail(path, "line 1", twice, "column given twice in the header (which one is meant?)",
                    "keep one of the two columns")
    return names


def _csv_rows(path: Path, text: str) -> tuple[TraceFormat, Rows]:
    reader = csv.DictReader(text.splitlines())
    try:
        reader.fieldnames = _header(path, reader.fieldnames or [])
        fmt, missing = closest(reader.fieldnames, "csv")
        if missing:
            raise _fail(path, "line 1", missing[0], "column missing from the header",
                        f"start the file with a known header: {known_headers('csv')}")
        rows = [(f"line {i + 2}", row) for i, row in enumerate(reader)]
        width = len(reader.fieldnames)
        for where, row in rows:   # DictReader files cells past the header under None, unread
            if None in row:
                raise ScenarioError("trace", f"{path.name} {where}: {width + len(row[None])} cells under a "
                                    f"header of {width} columns (a comma inside a cell not quoted?)",
                                    "give each row one cell per header column; quote a cell holding a comma")
        return fmt, rows
    except csv.Error as exc:
        raise ScenarioError("trace", f"{path.name} line {reader.line_num}: not readable as CSV ({exc})",
                            "write comma-separated rows under a header row") from None


def _bench_document(path: Path, text: str) -> dict[str, Any] | None:
    """The file as one `vllm bench serve` result, or None when it is not one (a JSONL trace)."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None
    if not (isinstance(doc, dict) and any(key in doc for key in BENCH_KEYS)):
        return None
    try:   # parsed again only to find a key given twice, which json.loads kept the last of
        return load_json(text)
    except DuplicateKey as exc:
        raise duplicate_key_error("trace", path.name, exc) from None


def _jsonl_rows(path: Path, text: str) -> tuple[TraceFormat, Rows]:
    rows: Rows = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = parse_document(load_json, line, "trace", f"{path.name} line {i}")
        except DuplicateKey as exc:
            raise _fail(path, f"line {i}", exc.key, "given twice in the row (which one is meant?)",
                        "keep one of the two") from None
        except json.JSONDecodeError as exc:
            raise ScenarioError("trace", f"{path.name} line {i}: not valid JSON ({exc.msg})",
                                "write one JSON object per line") from None
        if not isinstance(row, dict):
            raise ScenarioError("trace", f"{path.name} line {i}: not a JSON object",
                                "write one JSON object per line")
        rows.append((f"line {i}", row))
    return (closest(rows[0][1], "jsonl")[0] if rows else NATIVE), rows


def _rows(path: Path) -> tuple[TraceFormat, Rows]:
    text = _text(path)
    if path.suffix.lower() == ".csv":
        return _csv_rows(path, text)
    doc = _bench_document(path, text)
    if doc is None:
        return _jsonl_rows(path, text)
    rows, problem = bench_rows(doc)
    if problem:
        raise ScenarioError("trace", f"{path.name} (a vllm bench serve result): {problem}", VLLM_BENCH.fix)
    return VLLM_BENCH, rows


def _arrival(path: Path, where: str, row: dict[str, Any], fmt: TraceFormat) -> float | int:
    """The row's arrival in its format's own units (exact integers for a date-time)."""
    if fmt.parse_arrival is None:
        return _number(path, where, row, fmt.arrival, integer=False, fix=fmt.fix)
    raw = row.get(fmt.arrival)
    if raw in ("", None):
        raise _fail(path, where, fmt.arrival, "missing", f"give {fmt.arrival} on every row")
    try:
        return fmt.parse_arrival(str(raw))
    except ValueError as exc:
        raise _fail(path, where, fmt.arrival, f"{raw!r} is {exc}", fmt.fix) from None


def _failed_request(path: Path, where: str, row: dict[str, Any], fmt: TraceFormat) -> None:
    """A benchmark's failed request served no tokens: it cannot be replayed as a request."""
    if fmt.errors and row.get(fmt.errors):
        raise _fail(path, where, fmt.errors, f"the request failed in the benchmark "
                    f"({str(row[fmt.errors])[:80]!r})", fmt.fix)


def _seconds(path: Path, rows: Rows, arrivals: list[float | int], fmt: TraceFormat) -> list[float]:
    """Each row's arrival in seconds of the trace's clock: as written, or from the earliest."""
    if not fmt.from_first:
        for (where, _), a in zip(rows, arrivals, strict=True):
            if a < 0:
                raise _fail(path, where, fmt.arrival, f"must be >= 0, got {a}", fmt.fix)
        return [float(a) for a in arrivals]
    origin = min(arrivals)
    return [(a - origin) / fmt.units_per_s for a in arrivals]


def _replayed(path: Path, rows: Rows, seconds: list[float], fmt: TraceFormat, replay: Replay) -> list[int]:
    """The indices of the rows the replay keeps, each arrival checked against the clock's span."""
    kept = [i for i, a in enumerate(seconds) if replay.keeps(a)]
    if not kept:
        end = "its end" if replay.duration_s is None else f"{replay.start_s + replay.duration_s:g} s"
        raise ScenarioError("trace_start_s", f"no request of {path.name} arrives between "
                            f"{replay.start_s:g} s and {end} (its arrivals span {min(seconds):g} to "
                            f"{max(seconds):g} s)",
                            "choose trace_start_s and trace_duration_s within the trace's span")
    for i in kept:
        a = replay.time(seconds[i])
        if a > MAX_SPAN_S:
            raise _fail(path, rows[i][0], fmt.arrival, f"{a:.12g} s is past the {MAX_SPAN_S:g} s within "
                        "which the simulated clock (a float64 from 0) resolves a tenth of a microsecond",
                        "count arrivals from the trace's start (subtract the first arrival from each)"
                        if replay.whole else "replay a shorter window, or raise trace_speedup")
    return kept


def read_trace(path: str | Path, max_model_len: int, replay: Replay = Replay()) -> Trace:
    p = Path(path)
    fmt, rows = _rows(p)
    if not rows:
        raise ScenarioError("trace", f"{p.name} has no rows", "give a trace with at least one request")
    arrivals: list[float | int] = []
    prompt, output, acceptance = [], [], []
    for where, row in rows:
        _failed_request(p, where, row, fmt)
        a = _arrival(p, where, row, fmt)
        pl = _number(p, where, row, fmt.prompt, integer=True, fix=fmt.fix)
        ol = _number(p, where, row, fmt.output, integer=True, fix=fmt.fix)
        if pl < 1 or ol < 1:
            raise _fail(p, where, fmt.prompt if pl < 1 else fmt.output, "must be >= 1", fmt.fix)
        if pl + ol > max_model_len:   # name the larger of the two, the one that does not fit
            raise _fail(p, where, fmt.prompt if pl >= ol else fmt.output,
                        f"prompt + output = {_tokens(pl)} + {_tokens(ol)} = {_tokens(pl + ol)} exceeds "
                        f"max_model_len {max_model_len}", f"raise max_model_len to at least "
                                                          f"{_tokens(pl + ol)}, or shorten or drop that row")
        acc = math.nan
        if fmt.acceptance and row.get(fmt.acceptance) not in (None, ""):
            acc = _number(p, where, row, fmt.acceptance, integer=False, fix=fmt.fix)
            if not 0 < acc <= MAX_ACCEPTANCE:
                raise _fail(p, where, fmt.acceptance, f"must be in (0, 1 - 1e-9], got {acc!r}", fmt.fix)
        arrivals.append(a)
        prompt.append(int(pl))
        output.append(int(ol))
        acceptance.append(acc)
    zones = _zone_notes(p, rows, fmt)
    seconds = _seconds(p, rows, arrivals, fmt)
    kept = _replayed(p, rows, seconds, fmt, replay)
    arrival = np.array([replay.time(seconds[i]) for i in kept])
    order = np.argsort(arrival, kind="stable")
    return Trace(arrival[order], np.array(prompt, dtype=np.int64)[kept][order],
                 np.array(output, dtype=np.int64)[kept][order], np.array(acceptance)[kept][order],
                 zones + _order_notes(p, [rows[i][0] for i in kept], arrival))


def _zone_notes(path: Path, rows: Rows, fmt: TraceFormat) -> tuple[str, ...]:
    """Date-times on more than one clock: a naive one beside one with a UTC offset is refused
    (read as UTC it may be hours off, and no one can tell); several offsets are each converted
    to UTC exactly, which the note says, since the file's wall-clock times are not what replays."""
    if fmt.parse_arrival is None:
        return ()
    naive: str | None = None     # the first row without an offset
    offsets: dict[str, str] = {}  # each offset and the first row giving it
    for where, row in rows:
        raw = str(row[fmt.arrival])
        zone = utc_offset(raw)
        if zone is None:
            naive = naive or where
        else:
            offsets.setdefault(zone, where)
        if naive and offsets:
            shown, where0 = next(iter(offsets.items()))
            given, other = (f"UTC offset {zone}", f"{naive} has none") if zone else \
                ("no UTC offset", f"{where0} has {shown}")
            raise _fail(path, where, fmt.arrival, f"{raw!r} has {given}, but {other}: which clock is it on?",
                        f"give every {fmt.arrival} a UTC offset (e.g. +00:00), or none")
    if len(offsets) < 2:
        return ()
    zones = ", ".join(f"{zone} from {where}" for zone, where in offsets.items())
    return (f"trace: {path.name} mixes UTC offsets ({zones}): every {fmt.arrival} converted to UTC",)


def _order_notes(path: Path, where: list[str], arrival: np.ndarray) -> tuple[str, ...]:
    """A note when the file lists a request before one that arrived earlier: the run replays
    them in arrival order, which is not the file's, and `requests` keeps the earliest arrivals,
    not the first rows (a trace merged from several logs, or a clock that stepped back)."""
    back = np.flatnonzero(np.diff(arrival) < 0)
    if not back.size:
        return ()
    i = int(back[0]) + 1
    rows = "1 row arrives" if back.size == 1 else f"{back.size:,} rows arrive"
    return (f"trace: {path.name} is not in arrival order ({where[i]} arrives before {where[i - 1]}; "
            f"{rows} before the row above), replayed sorted by arrival",)


def scenario_trace(s: Scenario) -> Trace | None:
    """The trace a scenario replays, windowed and paced by its trace_* fields; None without one."""
    if not s.trace:
        return None
    return read_trace(s.trace, s.max_model_len, Replay(s.trace_speedup, s.trace_start_s, s.trace_duration_s))
