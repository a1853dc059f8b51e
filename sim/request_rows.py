"""The rows of requests that have ended: collected as they end, moved to disk past a threshold
(sim/spill.py), and given back in request order as requests.csv's columns.

Why: the request table (sim/requests.py) holds only live requests, so that a run's
memory does not grow with its request count; what grows is the record of those that ended, and it
goes to anonymous temporary files once it outgrows SPILL_ROWS. Requests end out of arrival order,
so the columns are put in request order at the end, one column at a time, each into a file of its
own: sorting a spilled run holds its request ids and the order (16 bytes a request) and one block.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from psdsim.sim.spill import BLOCK_ROWS, SpillFile

# Rows kept in memory (~9 MB) before they move to disk: the default scenario's 1,000 requests
# never spill; a 100,000-request run does.
SPILL_ROWS = 1 << 16


class RequestRows:
    """Ended requests' rows, column by column, in the order they ended."""

    def __init__(self) -> None:
        self._parts: dict[str, list[np.ndarray]] = {}
        self._files: dict[str, SpillFile] | None = None
        self._held = 0    # rows in memory
        self._rows = 0

    def __len__(self) -> int:
        return self._rows

    def add(self, columns: dict[str, np.ndarray]) -> None:
        """Rows of requests that ended, one array per column (the same columns every time)."""
        for name, values in columns.items():
            self._parts.setdefault(name, []).append(values)
        rows = len(columns["request"])
        self._rows += rows
        self._held += rows
        if self._held > SPILL_ROWS:
            self._spill()

    def _spill(self) -> None:
        if self._files is None:
            self._files = {name: SpillFile() for name in self._parts}
        for name, parts in self._parts.items():
            for part in parts:
                self._files[name].append(part)
            parts.clear()
        self._held = 0

    def columns(self, state_names: Sequence[str]) -> dict[str, np.ndarray]:
        """Every column in request order, the `state` codes as their names; memory-mapped
        read-only arrays where the rows were spilled."""
        names = np.array(state_names)
        if self._files is None:
            joined = {name: np.concatenate(parts) for name, parts in self._parts.items()}
            order = np.argsort(joined["request"], kind="stable")
            out = {name: values[order] for name, values in joined.items()}
            out["state"] = names[out["state"]]
            return out
        self._spill()
        mapped = {name: file.array() for name, file in self._files.items()}
        order = np.argsort(mapped["request"], kind="stable")
        out = {}
        for name in list(mapped):
            values = mapped.pop(name)
            file = SpillFile()
            for lo in range(0, len(order), BLOCK_ROWS):
                block = values[order[lo:lo + BLOCK_ROWS]]
                file.append(names[block] if name == "state" else block)
            del values   # unmapped once dropped: one column's pages at a time
            out[name] = file.array()
        return out
