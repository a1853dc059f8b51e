"""A table (named columns of numpy arrays) as CSV text: byte for byte what csv.writer (default
dialect) writes row by row, formatted a column at a time and in blocks of rows, so that a long
table, or one on disk (sim/spill.py), is never formatted whole."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from psdsim.sim.spill import blocks

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
    ends, minimal quoting, a row of one empty cell quoted (tests/sim/test_csv_writer.py compares them)."""
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
