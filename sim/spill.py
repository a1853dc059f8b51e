"""Columns kept on disk instead of in memory: appended part by part to anonymous temporary files,
mapped back as read-only arrays, and read in blocks that give their pages back.

Why: a long run's step table is ~0.3 KB a step packed, ~2.5 GB for a 1M-request run
of the default scenario; on disk it costs no memory, and a mapped column reads like any array.

The files are tempfile.TemporaryFile: unlinked as soon as they are made (O_TMPFILE on Linux), in
the system's temporary folder (TMPDIR, never a user's results folder), so nothing is left behind
however the process ends (success, an exception, Ctrl-C, a kill): the kernel frees the space once
the last array mapping a file is dropped. A mapped page read counts in the process's resident
memory until released, so readers go through `blocks`, which releases each block's pages after
it (the data stays in the page cache, which the kernel reclaims as it needs).

A temporary disk that fills (or refuses a file) while a run spills ends the run with one line
naming TMPDIR and the fix (a ScenarioError), not a traceback: the up-front estimate
(sim/footprint.py) cannot see what other programs write there meanwhile.
"""

from __future__ import annotations

import mmap
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import IO

import numpy as np

from psdsim.sim.errors import ScenarioError

# Rows a reader takes at a time: ~0.5 MB of a float column, small beside any run worth spilling.
BLOCK_ROWS = 65536


@contextmanager
def _temporary_disk() -> Iterator[None]:
    """An OSError of the temporary folder (ENOSPC while a table spills) as a ScenarioError
    naming TMPDIR: the buffered writes may fail at any write or flush."""
    try:
        yield
    except OSError as exc:
        raise ScenarioError("TMPDIR", f"cannot write the run's temporary tables in "
                            f"{tempfile.gettempdir()!r} ({exc.strerror or exc})",
                            "set TMPDIR to a folder on a disk with room, or lower requests") from None


def _temporary_file() -> IO[bytes]:
    with _temporary_disk():
        return tempfile.TemporaryFile(prefix="psdsim-spill-")   # closed by its owner


def _joinable(dtypes: set[np.dtype]) -> bool:
    """Parts that one fixed-width dtype holds as np.array would infer it over all their values:
    all strings (the widest width), or all bools and numbers (np.result_type's promotion)."""
    kinds = {dt.kind for dt in dtypes}
    return kinds <= {"U"} or kinds <= set("biuf")


def _mapped(fh: IO[bytes], dtype: np.dtype, rows: int) -> np.ndarray:
    with _temporary_disk():
        fh.flush()
    mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    return np.frombuffer(mm, dtype=dtype, count=rows)


class SpillFile:
    """One column's parts on disk, in order. A part whose dtype the last segment's holds (an int
    part after floats, a narrower string) joins that segment; a wider one starts a new segment,
    and `array` joins the segments as np.array would."""

    def __init__(self) -> None:
        self._fh = _temporary_file()   # closed by array, parts or close
        self.segments: list[tuple[np.dtype, int, int]] = []   # dtype, byte offset, rows
        self._size = 0

    def accepts(self, dtype: np.dtype) -> bool:
        """Whether a part of `dtype` can join this file's parts in one fixed-width dtype."""
        return _joinable({dtype, *(dt for dt, _, _ in self.segments)})

    def append(self, part: np.ndarray) -> None:
        if not len(part):
            return
        if self.segments and np.result_type(self.segments[-1][0], part.dtype) == self.segments[-1][0]:
            part = part.astype(self.segments[-1][0], copy=False)   # what `array` would make of it
        part = np.ascontiguousarray(part)
        if self.segments and self.segments[-1][0] == part.dtype:
            dtype, offset, rows = self.segments[-1]
            self.segments[-1] = (dtype, offset, rows + len(part))
        else:
            self.segments.append((part.dtype, self._size, len(part)))
        with _temporary_disk():
            self._fh.write(part.data)
        self._size += part.nbytes

    def parts(self) -> list[np.ndarray]:
        """The segments read back into memory (a column that turned out not to be joinable)."""
        mapped = self._segments()
        out = [np.array(part) for part in mapped]
        self.close()
        return out

    def array(self) -> np.ndarray:
        """The whole column as one read-only mapped array; segments of different dtypes are
        converted block by block into a second file, never held in memory at once."""
        dtypes = {dt for dt, _, _ in self.segments}
        rows = sum(r for _, _, r in self.segments)
        if len(dtypes) == 1:
            out = _mapped(self._fh, self.segments[0][0], rows)
        else:
            joined = np.result_type(*dtypes)
            with _temporary_file() as fh:
                for part in self._segments():
                    for lo in range(0, len(part), BLOCK_ROWS):
                        block = part[lo:lo + BLOCK_ROWS]
                        with _temporary_disk():
                            fh.write(block.astype(joined).data)
                        release(block)
                out = _mapped(fh, joined, rows)
        self.close()
        return out

    def _segments(self) -> list[np.ndarray]:
        if not self.segments:
            return []   # nothing written (an empty file cannot be mapped)
        with _temporary_disk():
            self._fh.flush()
        mm = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ)
        return [np.frombuffer(mm, dtype=dt, count=rows, offset=offset) for dt, offset, rows in self.segments]

    def close(self) -> None:
        self._fh.close()


def release(values: np.ndarray) -> None:
    """Give back the resident pages of `values` where it is a slice of a mapped array (nothing
    otherwise): a later read maps them again from the page cache or the disk."""
    if not isinstance(values, np.ndarray):
        return
    root = values
    while isinstance(root.base, np.ndarray):
        root = root.base
    view = root.base
    if not (isinstance(view, memoryview) and isinstance(view.obj, mmap.mmap) and values.nbytes):
        return
    mm = view.obj
    if not hasattr(mm, "madvise"):   # Windows: the pages stay until the kernel reclaims them
        return
    offset = values.ctypes.data - np.frombuffer(view, dtype=np.uint8, count=0).ctypes.data
    start = offset - offset % mmap.PAGESIZE
    mm.madvise(mmap.MADV_DONTNEED, start, min(offset + values.nbytes, len(mm)) - start)


def blocks(table: Mapping[str, np.ndarray], names: Sequence[str],
           rows: int | None = None) -> Iterator[dict[str, np.ndarray]]:
    """The columns `names` of `table` in blocks of `rows` rows (default BLOCK_ROWS), in order; a
    mapped column's pages are released after each block, so that reading a table on disk keeps
    about one block resident."""
    rows = rows or BLOCK_ROWS
    n = len(table[names[0]]) if names else 0
    for lo in range(0, n, rows):
        block = {name: table[name][lo:lo + rows] for name in names}
        yield block
        for values in block.values():
            release(values)
