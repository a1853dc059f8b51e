"""Per-request state as numpy columns: lengths, progress, lifecycle, timestamps, statistics.

Requests are data, not processes: a step updates the rows of its batch with one numpy operation
(docs/design.md §6), and the columns become `requests.csv` at the end of the run.

Lifecycle: WAITING (arrived; or preempted by recompute, to be prefilled again) -> PREFILLING
(admitted, prompt partly computed: chunked prefill) -> DECODING -> FINISHED or ABORTED; a
decoding request may be SWAPPED to CPU memory and back, or preempted to WAITING. A request whose
prompt can never fit the KV pool is REJECTED (vLLM: FINISHED_IGNORED).
"""

from __future__ import annotations

import heapq

import numpy as np
from psdsim.sim.numbers import isum
from psdsim.sim.workload import Workload

# Verification steps logged before their outcomes are folded into per-request totals.
LOG_FOLD = 4096

WAITING, PREFILLING, DECODING, SWAPPED, FINISHED, ABORTED, REJECTED = range(7)
STATE_NAMES = ("waiting", "prefilling", "decoding", "swapped", "finished", "aborted", "rejected")


class RequestTable:
    def __init__(self, w: Workload) -> None:
        n = len(w)
        self.arrival_s = w.arrival_s
        self.prompt_len = w.prompt_len
        self.output_len = w.output_len
        self.acceptance = w.acceptance
        self.acceptance_mean = w.acceptance_mean   # what the scenario configured (a prior)
        with np.errstate(invalid="ignore"):
            self.log_acceptance = np.log(w.acceptance)  # NaN without a draft model
        self.abort_delay_s = w.abort_delay_s
        self.prompt = w.prompt if w.prompt is not None else np.arange(n)
        self.cancels: list[tuple[float, int]] = []  # heap of (cancel time, request), see emit_first
        self.state = np.full(n, WAITING, dtype=np.int8)
        self.remaining = w.output_len.copy()  # output tokens still to generate
        self.kv_len = w.prompt_len.copy()     # prompt + generated: the tokens in the KV cache
        self.prefill_len = w.prompt_len.copy()  # tokens the next prefill must compute
        self.computed = np.zeros(n, dtype=np.int64)  # prefill tokens computed so far
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.recomputed = np.zeros(n, dtype=np.int64)  # tokens prefilled again after preemption
        self.admitted_s = np.full(n, np.nan)
        self.first_token_s = np.full(n, np.nan)
        self.finish_s = np.full(n, np.nan)  # finished requests only
        self.end_s = np.full(n, np.nan)     # when the request left: finished, aborted or rejected
        # Verification outcomes are logged per step (array references, no per-request updates
        # in the hot loop) and folded into per-request totals every LOG_FOLD steps, so that the
        # log's memory stays bounded in a long run (~0.7 KB a step otherwise; issue #14).
        self._verified: list[np.ndarray] = []
        self._proposed: list[np.ndarray] = []
        self._accepted: list[np.ndarray] = []
        self._folded = np.zeros((3, n), dtype=np.int64)   # verifications, proposed, accepted
        self._last_accepted = np.zeros(0, dtype=np.int64)
        self.completed: list[np.ndarray] = []  # emitted their last token: to retire

    def __len__(self) -> int:
        return len(self.prompt_len)

    @property
    def generated(self) -> np.ndarray:
        return self.output_len - self.remaining

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
        the same totals however the log is cut)."""
        if not self._verified:
            return
        n = len(self)
        ids = np.concatenate(self._verified)
        self._folded[0] += np.bincount(ids, minlength=n)
        for row, values in ((1, self._proposed), (2, self._accepted)):
            totals = np.bincount(ids, weights=np.concatenate(values), minlength=n)
            self._folded[row] += totals.astype(np.int64)
        self._last_accepted = self._accepted[-1]
        self._verified, self._proposed, self._accepted = [], [], []

    def _per_request(self, row: int) -> np.ndarray:
        self._fold()
        return self._folded[row].copy()

    def emit(self, ids: np.ndarray, tokens: np.ndarray) -> np.ndarray | None:
        """Append up to `tokens` to each request, never beyond its output length (vLLM discards
        tokens past max_tokens). Requests now complete are queued in `completed`. Returns the
        tokens kept where some were cut, or None when every request kept all its `tokens` (the
        common case, which spares the caller a sum)."""
        remaining = self.remaining[ids]
        kept = np.minimum(tokens, remaining)
        remaining -= kept
        self.remaining[ids] = remaining
        self.kv_len[ids] += kept
        if np.count_nonzero(remaining) < len(remaining):
            self.completed.append(ids[remaining == 0])
            return kept
        return None

    def first_token(self, ids: np.ndarray, now: float) -> None:
        """Requests received their first token: time it, and schedule their clients' cancels."""
        fresh = ids[np.isnan(self.first_token_s[ids])]
        self.first_token_s[fresh] = now
        for r in fresh[~np.isnan(self.abort_delay_s[fresh])].tolist():
            heapq.heappush(self.cancels, (now + float(self.abort_delay_s[r]), r))

    def due_cancels(self, now: float) -> list[int]:
        """Requests whose client has cancelled by `now`."""
        due = []
        while self.cancels and self.cancels[0][0] <= now:
            due.append(heapq.heappop(self.cancels)[1])
        return due

    def columns(self) -> dict[str, np.ndarray]:
        return {
            "request": np.arange(len(self)),
            "prompt": self.prompt,
            "arrival_s": self.arrival_s,
            "prompt_len": self.prompt_len,
            "output_len": self.output_len,
            "acceptance": self.acceptance,
            "state": np.array(STATE_NAMES)[self.state],
            "admitted_s": self.admitted_s,
            "first_token_s": self.first_token_s,
            "finish_s": self.finish_s,
            "end_s": self.end_s,
            "generated": self.generated,
            "verifications": self._per_request(0),
            "proposed": self._per_request(1),
            "accepted": self._per_request(2),
            "preemptions": self.preemptions,
            "recomputed_tokens": self.recomputed,
        }
