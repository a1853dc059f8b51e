"""One record per engine step; the run's step table is built from them at the end.

A method's step fills its `StepRecord` by field name as it goes (the target-pass helper its
verify and link figures, the outcome its token counts, ...) and sim/methods/common.record adds
what the plan and the running set say. A field left alone keeps its default. A new column is
one field here, with its default, and one assignment where it is measured; a field that is not
a column says so in its metadata (`NOT_A_COLUMN`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from operator import attrgetter

import numpy as np

from psdsim.sim.spill import SpillFile

PREFILL = "prefill"
DECODE = "decode"
NOT_A_COLUMN = {"column": False}   # a StepRecord field's metadata: kept for the step, not in the table


@dataclass(slots=True)
class StepRecord:
    """A record of one step; a run keeps `row(record)`, the values in column order. Slotted, so
    that a misspelt field is an error where it is set instead of a column that never fills."""

    kind: str = PREFILL         # DECODE if any request decoded (chunks may ride along), else PREFILL
    start_s: float = 0.0
    end_s: float = 0.0
    parallelised: bool = False  # verification overlapped drafting drafted in an earlier step
    running: int = 0            # requests in the running set (decoding + prefilling)
    batch0: int | None = None   # decoding requests in PSD's verified / False sub-batch; None: all decoding
    batch1: int = 0             # decoding requests in PSD's other / True sub-batch(es); 0 for SD, AR
    prefilling: int = 0         # running requests still prefilling
    verified: int = 0           # requests verified (scored by the target)
    drafted: int = 0            # requests drafted for a later step, overlapped with verification
    scored: int = 0             # target positions scored for decodes (proposals + 1 each)
    prefill_tokens: int = 0     # prompt tokens computed in this step
    prefill_groups: int = 0     # prompts scheduled, computed or not (vLLM's num_prefill_groups)
    prompts_done: int = 0       # prompts whose prefill completed in this step
    proposed: int = 0           # draft tokens verified
    accepted: int = 0           # draft tokens accepted
    generated: int = 0          # tokens emitted (kept) by this step, first tokens included
    unproposed: int = 0         # requests verified without drafts (a wasted speculation step)
    pre_drafts_wasted: int = 0  # tail pre-drafted: tokens pre-drafted beside this pass, thrown away
    draft_s: float = 0.0        # drafter compute in this step
    verify_s: float = 0.0       # target compute in this step
    comm_s: float = 0.0         # drafter<->verifier transfer time in this step
    return_s: float = 0.0       # of comm_s, the sampler output's return to the drafter
    wait_s: float = 0.0         # drafter idle between finishing its drafting and the verifier's output
    link_critical_s: float = 0.0  # how much shorter the step would be with a free link
    swap_s: float = 0.0         # KV swap time in this step
    preempted: int = 0          # requests preempted while planning this step
    kv_blocks: int = 0          # KV blocks in use once the step was planned
    waiting: int = 0            # requests queued once the step was planned
    # the engine's named terms (sim/execution.py; 0 under the roofline engine)
    prep_s: float = 0.0         # driver input prep before drafting (MineDraft), a part of draft_s
    framework_s: float = 0.0    # per-step scheduling and output processing on the critical path
    extra_rows: int = 0         # draft rows for requests whose drafts were all accepted (vLLM V0)
    verify_prep_s: float = 0.0  # the verifier's input prep (MineDraft: rank 1's rebuild), in verify_s
    timer_s: float = 0.0        # Timer synchronize() calls (MineDraft), in verify_s
    sample_s: float = 0.0       # full-vocab logits gathered to the first rank and sampled, in verify_s
    # Not a column: the drafter GPU time of the step's own work, charged to the drafter when the
    # step closes (a ring's background drafting is charged by the drafters, sim/devices.Drafter).
    drafter_s: float = field(default=0.0, metadata=NOT_A_COLUMN)


STEP_COLUMNS = tuple(f.name for f in fields(StepRecord) if f.metadata.get("column", True))
row = attrgetter(*STEP_COLUMNS)   # a record's values in column order


# Rows kept as Python tuples before they are packed into column arrays: a tuple of ~36 Python
# objects costs ~1.7 KB a step, a packed row ~0.3 KB (benchmarks/memory_footprint.py).
CHUNK_ROWS = 4096
# Packed rows kept in memory (~20 MB) before a run's step table moves to disk (sim/spill.py): the
# default scenario (~8,400 steps) never spills; a 10,000-request run (~83,000 steps) does.
SPILL_ROWS = 1 << 16


class StepRows:
    """A run's step rows (`row(record)` each), packed into column arrays every CHUNK_ROWS rows so
    that a long run keeps ~0.3 KB a step instead of a tuple of Python objects, and moved to
    anonymous temporary files once more than SPILL_ROWS are packed, so that its memory stays
    bounded however long it runs (a 1M-request run). step_table gives the arrays
    np.array would give over all the rows at once, memory-mapped where they were spilled."""

    def __init__(self) -> None:
        self._rows: list[tuple] = []
        self._parts: list[list[np.ndarray]] = [[] for _ in STEP_COLUMNS]   # packed, in memory
        self._held = 0                                   # rows in the packed parts
        self._files: list[SpillFile | None] | None = None   # once spilling: a file per column
        self.last: tuple | None = None   # the last step's row: what a method may observe of it

    def append(self, values: tuple) -> None:
        self._rows.append(values)
        self.last = values
        if len(self._rows) >= CHUNK_ROWS:
            self._pack()

    def _pack(self) -> None:
        if self._rows:
            for parts, col in zip(self._parts, zip(*self._rows, strict=True), strict=True):
                parts.append(np.array(col))
            self._held += len(self._rows)
            self._rows = []
            if self._held > SPILL_ROWS:
                self._spill()

    def _spill(self) -> None:
        """Move the packed parts to their columns' files. A column whose parts no fixed-width
        dtype holds (None beside integers: an object column, never in a simulated run, whose
        columns hold numbers, bools or the step kind) stays in memory from then on."""
        if self._files is None:
            self._files = [SpillFile() for _ in STEP_COLUMNS]
        for i, file in enumerate(self._files):
            if file is None:
                continue
            parts = self._parts[i]
            if all(file.accepts(p.dtype) for p in parts):
                for p in parts:
                    file.append(p)
                self._parts[i] = []
            else:
                self._parts[i] = [*file.parts(), *parts]
                self._files[i] = None
        self._held = 0

    def table(self) -> dict[str, np.ndarray]:
        """The step table, once the run has ended (its files are mapped and closed)."""
        self._pack()
        if self._files is not None:
            self._spill()   # the last parts too, so that a spilled column is one file
        if not self._held and self._files is None:
            return {name: np.empty(0) for name in STEP_COLUMNS}
        files = self._files or [None] * len(STEP_COLUMNS)
        return {name: _joined(parts) if file is None else file.array()
                for name, parts, file in zip(STEP_COLUMNS, self._parts, files, strict=True)}


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """One column from its packed parts, with the dtype np.array infers over all its values: the
    parts' own where they agree (strings of any width), else inferred again from the values
    (e.g. None in one part and integers in another make an object column, as they would)."""
    if len({p.dtype for p in parts}) == 1 or all(p.dtype.kind == "U" for p in parts):
        return np.concatenate(parts)
    return np.array(np.concatenate([p.astype(object) for p in parts]).tolist())


def step_table(rows: StepRows) -> dict[str, np.ndarray]:
    return rows.table()
