"""Per-request state as numpy columns, one slot per request the engine has taken in.

Requests are data, not processes: a step updates the rows of its batch with one numpy operation
(docs/design.md §6), and a request's row becomes a line of `requests.csv` once it has ended.

Slots (a run's memory must not grow with its request count): the table holds only the
requests the engine has taken in (admitted, or at the head of the waiting queue) and that have not
ended. A request that has arrived but waits behind others is still a row of the workload stream
(sim/workload.py), drawn when it reaches the head of the queue (`take`); a request that ends leaves
its final row to `RequestRows` (on disk past a threshold) and its slot to a later request. Every
array indexed by request is indexed by slot: the table's own columns, and those of the scheduler,
the KV pools and the methods, which `track` keeps sized and resets for a slot's new request. The
request a slot holds is `request[slot]`, its index in arrival order (the id requests.csv shows).

Lifecycle: WAITING (arrived; or preempted by recompute, to be prefilled again) -> PREFILLING
(admitted, prompt partly computed: chunked prefill) -> DECODING -> FINISHED or ABORTED; a
decoding request may be SWAPPED to CPU memory and back, or preempted to WAITING. A request whose
prompt can never fit the KV pool is REJECTED (vLLM: FINISHED_IGNORED).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Protocol

import numpy as np

from psdsim.sim.numbers import isum
from psdsim.sim.request_rows import RequestRows
from psdsim.sim.workload import Workload

# Verification steps logged before their outcomes are folded into per-request totals.
LOG_FOLD = 4096
# Slots a table starts with (fewer when the run has fewer requests); it doubles when all are taken.
FIRST_SLOTS = 256

WAITING, PREFILLING, DECODING, SWAPPED, FINISHED, ABORTED, REJECTED = range(7)
STATE_NAMES = ("waiting", "prefilling", "decoding", "swapped", "finished", "aborted", "rejected")
LIVE = (WAITING, PREFILLING, DECODING, SWAPPED)

# A slot's columns and their dtypes (see RequestTable.take for what each starts at).
_COLUMNS: dict[str, type] = {
    "request": np.int64, "prompt": np.int64, "arrival_s": np.float64, "prompt_len": np.int64,
    "output_len": np.int64, "acceptance": np.float64, "log_acceptance": np.float64,
    "abort_delay_s": np.float64, "state": np.int8,
    "kv_len": np.int64,         # prompt + generated: the tokens in the KV cache
    "final_len": np.int64,      # prompt + output length: kv_len once the request is complete
    "prefill_len": np.int64,    # tokens the next prefill must compute
    "computed": np.int64,       # prefill tokens computed so far
    "preemptions": np.int64,
    "recomputed": np.int64,     # tokens prefilled again after preemption
    "admitted_s": np.float64, "first_token_s": np.float64,
    "finish_s": np.float64,     # finished requests only
    "end_s": np.float64,        # when the request left: finished, aborted or rejected
}


class WorkloadSource(Protocol):
    """What the table reads requests from: sim/workload.WorkloadStream, or one Workload."""

    n: int
    acceptance_mean: float | None

    def blocks(self) -> Iterator[Workload]: ...


class _OneBlock:
    """A drawn Workload as a source of one block (tests, small tables built by hand)."""

    def __init__(self, w: Workload) -> None:
        self.w, self.n, self.acceptance_mean = w, len(w), w.acceptance_mean

    def blocks(self) -> Iterator[Workload]:
        yield self.w


class _Cursor:
    """Reads a source's rows in order, one block in memory at a time."""

    def __init__(self, source: WorkloadSource) -> None:
        self._blocks = source.blocks()
        self.block: Workload | None = None
        self.base = 0      # the request index of the block's first row
        self.log_acceptance = np.empty(0)   # the block's, NaN without a draft model

    def row(self, request: int) -> tuple[Workload, int]:
        """The block holding `request` (never before the previous one asked for) and its row."""
        while self.block is None or request - self.base >= len(self.block):
            if self.block is not None:
                self.base += len(self.block)
            self.block = next(self._blocks)
            with np.errstate(invalid="ignore", divide="ignore"):
                self.log_acceptance = np.log(self.block.acceptance)
        return self.block, request - self.base


class RequestTable:
    request: np.ndarray
    prompt: np.ndarray
    arrival_s: np.ndarray
    prompt_len: np.ndarray
    output_len: np.ndarray
    acceptance: np.ndarray
    log_acceptance: np.ndarray
    abort_delay_s: np.ndarray
    state: np.ndarray
    kv_len: np.ndarray
    final_len: np.ndarray
    prefill_len: np.ndarray
    computed: np.ndarray
    preemptions: np.ndarray
    recomputed: np.ndarray
    admitted_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    end_s: np.ndarray

    def __init__(self, source: WorkloadSource | Workload) -> None:
        if isinstance(source, Workload):
            source = _OneBlock(source)
        self.n = source.n                            # requests in the run
        self.acceptance_mean = source.acceptance_mean  # what the scenario configured (a prior)
        self._rows = _Cursor(source)                 # requests taken into slots, in order
        self._arrivals = _Cursor(source)             # requests' arrival times, read ahead
        self.arrived = 0     # requests whose arrival time has come (the engine has seen it)
        self.next_arrival_s = self._arrival_of(0)   # the next request's arrival (inf: none left)
        self.taken = 0       # requests taken into a slot (all of them arrived)
        self.capacity = min(self.n, FIRST_SLOTS)
        for name, dtype in _COLUMNS.items():
            setattr(self, name, np.zeros(self.capacity, dtype=dtype))
        self._free = list(range(self.capacity - 1, -1, -1))   # slots to give, lowest first
        self._ended: list[int] = []   # slots whose request ended, until their row is written
        self._tracked: list[tuple[object, str]] = []
        self.records = RequestRows()
        self.cancels: list[tuple[float, int, int]] = []  # heap of (cancel time, request, slot)
        # Verification outcomes are logged per step (array references, no per-request updates
        # in the hot loop) and folded into per-request totals every LOG_FOLD steps, or when an
        # ended request's row is written, so that the log's memory stays bounded in a long run.
        self._verified: list[np.ndarray] = []
        self._proposed: list[np.ndarray] = []
        self._accepted: list[np.ndarray] = []
        self._folded = np.zeros((3, self.capacity), dtype=np.int64)   # verifications, proposed, accepted
        self._last_accepted = np.zeros(0, dtype=np.int64)
        self.completed: list[np.ndarray] = []  # emitted their last token: to retire

    # -- arrivals and slots -------------------------------------------------------------------

    def arrive_until(self, now: float) -> None:
        """Count the requests that have arrived by `now` (arrivals are sorted). Once all have,
        the next arrival is at infinity, which a clock gone infinite (a cost of inf) reaches too:
        the count stops there, and the summary refuses the run's figures (sim/metrics.py)."""
        while self.arrived < self.n and self.next_arrival_s <= now:
            block, i = self._arrivals.row(self.arrived)
            self.arrived += int(np.searchsorted(block.arrival_s[i:], now, side="right"))
            self.next_arrival_s = self._arrival_of(self.arrived)

    def _arrival_of(self, request: int) -> float:
        if request >= self.n:
            return float("inf")
        block, i = self._arrivals.row(request)
        return float(block.arrival_s[i])

    def track(self, owner: object, name: str) -> None:
        """Keep `owner.<name>`, an array indexed by slot (zero for a slot's new request), sized as
        the table grows, and reset it when a slot takes a new request."""
        self._tracked.append((owner, name))
        self._fit(owner, name)

    def _fit(self, owner: object, name: str) -> None:
        values = getattr(owner, name)
        if len(values) < self.capacity:
            setattr(owner, name, np.concatenate([values, np.zeros(self.capacity - len(values),
                                                                  dtype=values.dtype)]))

    def take(self) -> int:
        """Take the next arrived request into a slot (as WAITING); returns the slot."""
        assert self.taken < self.arrived, "no arrived request left to take"
        if not self._free:
            if self._ended:
                self._fold()
            else:
                self._grow()
        slot = self._free.pop()
        request = self.taken
        self.taken += 1
        block, i = self._rows.row(request)
        self.request[slot] = request
        self.prompt[slot] = block.prompt[i] if block.prompt is not None else request
        self.arrival_s[slot] = block.arrival_s[i]
        self.prompt_len[slot] = self.kv_len[slot] = self.prefill_len[slot] = block.prompt_len[i]
        self.output_len[slot] = block.output_len[i]
        self.final_len[slot] = block.prompt_len[i] + block.output_len[i]
        self.acceptance[slot] = block.acceptance[i]
        self.log_acceptance[slot] = self._rows.log_acceptance[i]
        self.abort_delay_s[slot] = block.abort_delay_s[i]
        self.state[slot] = WAITING
        self.computed[slot] = self.preemptions[slot] = self.recomputed[slot] = 0
        self.admitted_s[slot] = self.first_token_s[slot] = self.finish_s[slot] = self.end_s[slot] = np.nan
        self._folded[:, slot] = 0
        for owner, name in self._tracked:
            getattr(owner, name)[slot] = 0
        return slot

    def _grow(self) -> None:
        old, self.capacity = self.capacity, self.capacity * 2
        for name in _COLUMNS:
            values = getattr(self, name)
            setattr(self, name, np.concatenate([values, np.zeros(old, dtype=values.dtype)]))
        self._folded = np.concatenate([self._folded, np.zeros((3, old), dtype=np.int64)], axis=1)
        for owner, name in self._tracked:
            self._fit(owner, name)
        self._free.extend(range(self.capacity - 1, old - 1, -1))

    def retire(self, slots: np.ndarray | list[int]) -> None:
        """These requests ended (their state and end time are set): their rows are written, and
        their slots freed, at the next fold."""
        self._ended.extend(np.asarray(slots, dtype=np.int64).tolist())

    # -- the hot path ---------------------------------------------------------------------

    def context(self, ids: np.ndarray) -> int:
        """Tokens in the KV cache of these requests (prompt + generated so far)."""
        return isum(self.kv_len[ids])

    @property
    def last_accepted(self) -> np.ndarray:
        """Per request, the drafts accepted by the latest verification logged."""
        return self._accepted[-1] if self._accepted else self._last_accepted

    def log_verification(self, ids: np.ndarray, proposed: np.ndarray, accepted: np.ndarray) -> None:
        self._verified.append(ids)
        self._proposed.append(proposed)
        self._accepted.append(accepted)
        if len(self._verified) >= LOG_FOLD:
            self._fold()

    def _fold(self) -> None:
        """Add the logged outcomes to the per-request totals and empty the log (integer sums:
        the same totals however the log is cut); then write the ended requests' rows and free
        their slots."""
        if self._verified:
            n = self.capacity
            ids = np.concatenate(self._verified)
            self._folded[0] += np.bincount(ids, minlength=n)
            for row, values in ((1, self._proposed), (2, self._accepted)):
                totals = np.bincount(ids, weights=np.concatenate(values), minlength=n)
                self._folded[row] += totals.astype(np.int64)
            self._last_accepted = self._accepted[-1]
            self._verified, self._proposed, self._accepted = [], [], []
        if self._ended:
            slots = np.array(self._ended, dtype=np.int64)
            self.records.add({
                "request": self.request[slots], "prompt": self.prompt[slots],
                "arrival_s": self.arrival_s[slots], "prompt_len": self.prompt_len[slots],
                "output_len": self.output_len[slots], "acceptance": self.acceptance[slots],
                "state": self.state[slots], "admitted_s": self.admitted_s[slots],
                "first_token_s": self.first_token_s[slots], "finish_s": self.finish_s[slots],
                "end_s": self.end_s[slots], "generated": self.kv_len[slots] - self.prompt_len[slots],
                "verifications": self._folded[0, slots], "proposed": self._folded[1, slots],
                "accepted": self._folded[2, slots], "preemptions": self.preemptions[slots],
                "recomputed_tokens": self.recomputed[slots]})
            self._free.extend(self._ended)
            self._ended = []

    def emit(self, ids: np.ndarray, tokens: np.ndarray) -> np.ndarray | None:
        """Append up to `tokens` to each request, never beyond its output length (vLLM discards
        tokens past max_tokens). Requests now complete are queued in `completed`. Returns the
        tokens kept where some were cut, or None when every request kept all its `tokens` (the
        common case, which spares the caller a sum). A request's generated tokens are kv_len -
        prompt_len (a recompute preemption re-prefills them, it does not drop them), so kv_len
        alone is kept up to date: six numpy operations in the common case."""
        length = self.kv_len[ids]
        grown = length + tokens
        final = self.final_len[ids]
        ended = grown >= final
        if not np.count_nonzero(ended):
            self.kv_len[ids] = grown
            return None
        grown = np.minimum(grown, final)
        self.kv_len[ids] = grown
        self.completed.append(ids[ended])
        return grown - length

    def first_token(self, ids: np.ndarray, now: float) -> None:
        """Requests received their first token: time it, and schedule their clients' cancels."""
        fresh = ids[np.isnan(self.first_token_s[ids])]
        self.first_token_s[fresh] = now
        for r in fresh[~np.isnan(self.abort_delay_s[fresh])].tolist():
            heapq.heappush(self.cancels, (now + float(self.abort_delay_s[r]), int(self.request[r]), r))

    def due_cancels(self, now: float) -> list[int]:
        """Slots of the requests whose client has cancelled by `now` (a request that has ended
        meanwhile, its slot perhaps holding another one, is not among them)."""
        due = []
        while self.cancels and self.cancels[0][0] <= now:
            _, request, slot = heapq.heappop(self.cancels)
            if self.request[slot] == request and self.state[slot] in LIVE:
                due.append(slot)
        return due

    def columns(self) -> dict[str, np.ndarray]:
        """requests.csv's columns, in request order, once every request has ended."""
        self._fold()
        assert len(self.records) == self.n, "columns() before every request ended"
        return self.records.columns(STATE_NAMES)
