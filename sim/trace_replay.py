"""Request traces: JSONL or CSV rows of arrival time, prompt tokens, output tokens, acceptance.

Columns (extra columns are ignored): `arrival_s` (seconds, in [0, 1e9]: the simulated clock
starts at 0 and resolves a tenth of a microsecond up to 1e9 s, sim/scenario.py MAX_SPAN_S),
`prompt_tokens` (>= 1), `output_tokens` (>= 1), prompt + output at most max_model_len, and
optionally `acceptance` (per-token acceptance in (0, 1 - 1e-9], the highest rate the acceptance
model takes as given; rows without it draw from the scenario's distribution). A malformed row is
reported with its line number and field, as a ScenarioError naming `trace`; no value is clamped.
Rows are replayed in arrival order (stable for ties).
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
from psdsim.sim.documents import parse_document
from psdsim.sim.errors import ScenarioError
from psdsim.sim.numbers import number
from psdsim.sim.scenario import MAX_SPAN_S, path_field_file

REQUIRED = ("arrival_s", "prompt_tokens", "output_tokens")


@dataclass(frozen=True)
class Trace:
    arrival_s: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray
    acceptance: np.ndarray  # NaN where the row gives none


def _fail(path: Path, line: int, field: str, problem: str,
          fix: str = "correct that row of the trace (columns: arrival_s, prompt_tokens, output_tokens, "
                     "acceptance)") -> ScenarioError:
    return ScenarioError("trace", f"{path.name} line {line}: field {field!r}: {problem}", fix)


def _number(path: Path, line: int, row: dict[str, Any], field: str, *, integer: bool) -> float:
    if field not in row or row[field] in ("", None):
        raise _fail(path, line, field, "missing", f"give {field} on every row")
    raw = row[field]
    try:
        value = math.nan if isinstance(raw, bool) else number(raw) if isinstance(raw, str) else float(raw)
    except (TypeError, ValueError):
        raise _fail(path, line, field, f"not a number: {raw!r}") from None
    if not math.isfinite(value) or (integer and value != int(value)):
        kind = "an integer" if integer else "a finite number"
        raise _fail(path, line, field, f"must be {kind}, got {raw!r}")
    return value


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
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ScenarioError("trace", f"{path.name} is not UTF-8 text (a binary file?)", what) from None
    except OSError as exc:
        raise ScenarioError("trace", f"cannot read {str(path)!r} ({exc.strerror or exc})", what) from None


def _rows(path: Path) -> list[tuple[int, dict[str, Any]]]:
    text = _text(path)
    if path.suffix.lower() == ".csv":
        reader = csv.DictReader(text.splitlines())
        try:
            missing = [f for f in REQUIRED if f not in (reader.fieldnames or [])]
            if missing:
                raise _fail(path, 1, missing[0], "column missing from the header",
                            f"start the file with the header {','.join(REQUIRED)},acceptance")
            return [(i + 2, row) for i, row in enumerate(reader)]
        except csv.Error as exc:
            raise ScenarioError("trace", f"{path.name} line {reader.line_num}: not readable as CSV ({exc})",
                                "write comma-separated rows under a header row") from None
    rows = []
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = parse_document(json.loads, line, "trace", f"{path.name} line {i}")
        except json.JSONDecodeError as exc:
            raise ScenarioError("trace", f"{path.name} line {i}: not valid JSON ({exc.msg})",
                                "write one JSON object per line") from None
        if not isinstance(row, dict):
            raise ScenarioError("trace", f"{path.name} line {i}: not a JSON object",
                                "write one JSON object per line")
        rows.append((i, row))
    return rows


def read_trace(path: str | Path, max_model_len: int) -> Trace:
    p = Path(path)
    rows = _rows(p)
    if not rows:
        raise ScenarioError("trace", f"{p.name} has no rows", "give a trace with at least one request")
    arrival, prompt, output, acceptance = [], [], [], []
    for line, row in rows:
        a = _number(p, line, row, "arrival_s", integer=False)
        pl = _number(p, line, row, "prompt_tokens", integer=True)
        ol = _number(p, line, row, "output_tokens", integer=True)
        if a < 0:
            raise _fail(p, line, "arrival_s", f"must be >= 0, got {a}")
        if a > MAX_SPAN_S:
            raise _fail(p, line, "arrival_s", f"{a:.12g} s is past the {MAX_SPAN_S:g} s within which the "
                        "simulated clock (a float64 from 0) resolves a tenth of a microsecond",
                        "count arrivals from the trace's start (subtract the first arrival from each)")
        if pl < 1 or ol < 1:
            field = "prompt_tokens" if pl < 1 else "output_tokens"
            raise _fail(p, line, field, "must be >= 1")
        if pl + ol > max_model_len:   # name the larger of the two, the one that does not fit
            raise _fail(p, line, "prompt_tokens" if pl >= ol else "output_tokens",
                        f"prompt + output = {_tokens(pl)} + {_tokens(ol)} = {_tokens(pl + ol)} exceeds "
                        f"max_model_len {max_model_len}", f"raise max_model_len to at least "
                                                          f"{_tokens(pl + ol)}, or shorten or drop that row")
        acc = math.nan
        if row.get("acceptance") not in (None, ""):
            acc = _number(p, line, row, "acceptance", integer=False)
            if not 0 < acc <= MAX_ACCEPTANCE:
                raise _fail(p, line, "acceptance", f"must be in (0, 1 - 1e-9], got {acc!r}")
        arrival.append(a)
        prompt.append(int(pl))
        output.append(int(ol))
        acceptance.append(acc)
    order = np.argsort(np.array(arrival), kind="stable")
    return Trace(np.array(arrival)[order], np.array(prompt, dtype=np.int64)[order],
                 np.array(output, dtype=np.int64)[order], np.array(acceptance)[order])
