"""vLLM V0 scheduling without chunked prefill (MineDraft's setting): queues and admission.

Each engine step is either a prefill-only step, when waiting requests can be admitted, or a
decode step over the running requests (prefill-first, reference nsight_vllm.md §3.2). Admission
is FCFS while the running set is below its cap (m, or 2m for PSD), the step's prompt tokens fit
`max_num_batched_tokens`, and the KV pool has room. In this first version a request reserves
KV blocks for its whole life at admission (prompt + output + k lookahead), so the pool can never
be oversubscribed and nothing is preempted; block-level allocation and preemption come later.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

from sim.requests import RequestTable


class Scheduler:
    def __init__(self, table: RequestTable, kv_blocks: int, block_size: int, lookahead: int,
                 max_running: int, token_budget: int) -> None:
        self.table = table
        self.max_running = max_running
        self.token_budget = token_budget
        self.waiting: deque[int] = deque()
        self.running = np.empty(0, dtype=np.int64)  # admission order, like vLLM's running deque
        self.finished = 0
        self.kv_blocks_total = kv_blocks
        self.kv_blocks_free = kv_blocks
        self.kv_blocks_peak = 0  # most blocks ever in use
        need = np.ceil((table.prompt_len + table.output_len + lookahead) / block_size)
        self._kv_need = np.minimum(need, kv_blocks).astype(np.int64)
        self._next = 0  # next request to arrive; arrivals are sorted

    @property
    def done(self) -> bool:
        return self.finished == len(self.table)

    def arrive_until(self, now: float) -> None:
        arrivals, n = self.table.arrival_s, len(self.table)
        while self._next < n and arrivals[self._next] <= now:
            self.waiting.append(self._next)
            self._next += 1

    def next_arrival_s(self) -> float:
        return float(self.table.arrival_s[self._next]) if self._next < len(self.table) else math.inf

    def admit(self, now: float) -> np.ndarray:
        """Requests for a prefill step: FCFS while seats, token budget and KV blocks last."""
        if not self.waiting or len(self.running) >= self.max_running:
            return self.running[:0]
        chosen: list[int] = []
        tokens = 0
        seats = self.max_running - len(self.running)
        prompts = self.table.prompt_len
        while self.waiting and len(chosen) < seats:
            r = self.waiting[0]
            if tokens + prompts[r] > self.token_budget or self._kv_need[r] > self.kv_blocks_free:
                break
            self.waiting.popleft()
            chosen.append(r)
            tokens += int(prompts[r])
            self.kv_blocks_free -= int(self._kv_need[r])
        ids = np.array(chosen, dtype=np.int64)
        self.kv_blocks_peak = max(self.kv_blocks_peak, self.kv_blocks_total - self.kv_blocks_free)
        if chosen:
            self.table.admitted_s[ids] = now
            self.running = np.concatenate([self.running, ids])
        return ids

    def retire_completed(self, now: float) -> np.ndarray:
        """Retire the requests that emitted their last token in this step (queued by
        RequestTable.emit); free their KV blocks. Returns the retired ids."""
        t = self.table
        if not t.completed:
            return self.running[:0]
        done = np.concatenate(t.completed)
        t.completed.clear()
        self.running = self.running[t.remaining[self.running] > 0]
        t.finish_s[done] = now
        self.finished += len(done)
        self.kv_blocks_free += int(self._kv_need[done].sum())
        return done
