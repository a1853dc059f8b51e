"""Engine scheduling as a named vLLM version does it: queues, admission, KV growth, preemption.

Why one module: one vLLM scheduler's rules (admission, growth, preemption, swap) share its
queues and pools, and read together against vLLM's own scheduler.

Each engine step is planned here (a StepPlan) and executed by the method (sim/methods), then
closed here (prefills that completed, requests that finished or were aborted).

vllm-v0 without chunked prefill (MineDraft's setting, docs/reference/nsight_vllm.md §3.2):
prefill-first. If nothing is swapped out and waiting requests can be admitted (FCFS, seats below
the running cap, prompt tokens within max_num_batched_tokens, blocks free above the watermark)
the step is prefill-only. Otherwise it is a decode step over the running requests: each grows its
KV to context + lookahead, in running order, if the free blocks cover every block its append
touches, the partly written last block included (vLLM's `can_append_slots`); when they do not,
the last running request is preempted, again and again, possibly the request itself (recompute:
freed and put back at the front of the waiting queue, to prefill its prompt and output again;
swap: its blocks copied to CPU memory, when the swap space holds them). If the step preempted
nothing, swapped requests come back in, each once the blocks of all its tokens fit, this step's
token and lookahead included (vLLM's `can_swap_in`), or end rejected when the pool can never hold
them. A plan that preempted every request it would run is planned again at once (vLLM's engine
runs an empty step and schedules the victim in the next).
vllm-v0 with chunked prefill: decode-first; one mixed step holds the running decodes (one token
each against the budget), swap-ins, then prefill chunks, partial ones first, then new prompts,
each admitted with its whole prompt's blocks; the step's recompute victims rejoin the waiting
queue after its prompts are chosen. (vLLM lists the new prompts before the partial ones; psdsim
keeps them after, since the order in which prompts complete orders PSD's sub-batch members.)
vllm-v1 (docs/reference/nsight_vllm.md §3.1): chunked always; decodes count 1 + their draft
tokens against the budget (draft tokens are cut first when it runs short, in running order; unlike
vLLM, no decode is left out of a step); recompute only; a decode is preempted only when it needs
new blocks that are not free (`KVCacheManager.allocate_slots`); a step that preempted admits no
new requests.
With chunked prefill a method may leave some planned chunks uncomputed (PSD under MineDraft's
code computes only the verified sub-batch's, `computes_chunks`): they keep their budget and
blocks, and close as the real engine closes them (see `_leave_uncomputed`).
Simplifications: prefill chunks never preempt (a chunk without free blocks waits a step).
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from psdsim.sim.kv import KVPools
from psdsim.sim.numbers import isum
from psdsim.sim.requests import (
    ABORTED,
    DECODING,
    FINISHED,
    PREFILLING,
    REJECTED,
    SWAPPED,
    WAITING,
    RequestTable,
)

if TYPE_CHECKING:
    from psdsim.sim.scenario import Scenario

EMPTY = np.empty(0, dtype=np.int64)


class StepPlan:
    """One engine step's plan. Class attributes are the defaults (arrays shared and never written
    in place: fields are only ever reassigned), so that a plan costs only the fields it sets."""

    decode: np.ndarray = EMPTY     # decoding requests, in running order
    prefill: np.ndarray = EMPTY    # requests computing prompt tokens
    chunk: np.ndarray = EMPTY      # prompt tokens each computes
    completes: np.ndarray = EMPTY  # bool: its prompt is done after the step
    # Prompt chunks scheduled but not computed (PSD's drafted sub-batch, MineDraft's code): their
    # requests, and the tokens marked computed anyway (their chunk, or 0 for a prompt's last one).
    uncomputed: np.ndarray = EMPTY
    marked: np.ndarray = EMPTY
    spec_cap: np.ndarray | None = None  # vllm-v1: most draft tokens per decode request
    preempted: int = 0
    swap_blocks: int = 0              # KV blocks moved to or from CPU memory this step
    kv_blocks: int = 0                # blocks in use once the step is planned
    waiting: int = 0                  # requests queued once the step is planned

    @property
    def empty(self) -> bool:
        return not len(self.decode) and not len(self.prefill)

    @property
    def prefill_groups(self) -> int:
        """Prompts the step schedules, computed or not: vLLM's `num_prefill_groups`, which makes a
        step a prompt run (`is_prompt_run`) that the paper's step metrics leave out."""
        return len(self.prefill) + len(self.uncomputed)


class WaitingQueue:
    """vLLM's waiting queue, FCFS: the requests sent back by recompute preemptions at its front
    (in slots), then those that have arrived and were never taken in, in arrival order, which stay
    rows of the workload stream until one reaches the head (the table takes it into a slot then,
    sim/requests.py), so that a queue of a million arrivals costs no memory."""

    def __init__(self, table: RequestTable) -> None:
        self.table = table
        self.held: deque[int] = deque()   # slots

    def __len__(self) -> int:
        return len(self.held) + self.table.arrived - self.table.taken

    def __bool__(self) -> bool:
        return bool(self.held) or self.table.arrived > self.table.taken

    def head(self) -> int:
        """The slot of the request at the head (the queue must not be empty)."""
        if not self.held:
            self.held.append(self.table.take())
        return self.held[0]

    def popleft(self) -> int:
        """Take the head out (after `head`)."""
        return self.held.popleft()

    def appendleft(self, slot: int) -> None:
        self.held.appendleft(slot)

    def remove(self, slot: int) -> None:
        self.held.remove(slot)


class Scheduler:
    def __init__(self, table: RequestTable, kv: KVPools, *, version: str, chunked: bool,
                 swap: bool, swap_blocks: int, max_running: int, token_budget: int) -> None:
        self.table = table
        self.kv = kv
        self.v1 = version == "vllm-v1"
        self.chunked = chunked
        self.swap = swap
        self.swap_capacity = swap_blocks
        self.swap_used = 0
        self.max_running = max_running
        self.token_budget = token_budget
        self.waiting = WaitingQueue(table)
        self.swapped: deque[int] = deque()
        self.preempted_now: list[int] = []   # recompute victims of the step being planned
        self.running = EMPTY.copy()   # admission order (vLLM's running deque): victims from the end
        self._cpu_blocks = np.zeros(table.capacity, dtype=np.int64)
        table.track(self, "_cpu_blocks")
        table.track(kv, "held")
        table.track(kv, "written")
        self.ended = 0                # requests finished, aborted or rejected
        self.preemptions = 0
        self.prefilling = 0           # running requests still prefilling

    # -- arrivals -------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self.ended == self.table.n

    def arrive_until(self, now: float) -> None:
        self.table.arrive_until(now)

    def next_arrival_s(self) -> float:
        return self.table.next_arrival_s

    # -- planning -------------------------------------------------------------------------

    def plan(self, method: EngineHooks, now: float) -> StepPlan:
        """The next step's plan. A plan that preempted every request it would run (a lone request
        whose append touches more blocks than are free preempts itself) runs nothing: as vLLM
        0.9.2's engine, whose `Scheduler._schedule_running` sends the request back to waiting or
        swapped and whose next step schedules it again, psdsim plans once more at once, the
        empty plans' preemptions and swapped blocks carried into the one that runs."""
        method.planning()
        plan = self._plan_once(method, now)
        preempted = swap_blocks = 0
        while plan.empty and plan.preempted:
            preempted, swap_blocks = preempted + plan.preempted, swap_blocks + plan.swap_blocks
            plan = self._plan_once(method, now)
        plan.preempted += preempted
        plan.swap_blocks += swap_blocks
        plan.kv_blocks = self.kv.used
        plan.waiting = len(self.waiting)
        return plan

    def _plan_once(self, method: EngineHooks, now: float) -> StepPlan:
        plan = self._plan_chunked(method, now) if self.chunked else self._plan_v0(method, now)
        self._requeue_preempted()
        return plan

    def quiet(self, plan: StepPlan) -> bool:
        """Whether `plan` is a decode step over the whole running set and nothing else: no prompt,
        no swap, no preemption, no chunking (then the next plans would be the same decode step,
        the KV growth aside, until a request ends or one could be admitted: `may_admit`)."""
        return (not self.chunked and not self.swapped and not self.prefilling and not plan.preempted
                and not len(plan.prefill) and len(plan.decode) == len(self.running))

    def may_admit(self) -> bool:
        """Whether a step planned now might admit a request (a seat free and someone waiting)."""
        return len(self.running) < self.max_running and bool(self.waiting)

    def _decoding(self) -> np.ndarray:
        if not self.prefilling:
            return self.running
        return self.running[self.table.state[self.running] == DECODING]

    def _plan_v0(self, method: EngineHooks, now: float) -> StepPlan:
        if not self.swapped:
            admitted = self._admit_whole(method, now)
            if len(admitted):
                chunk = self.table.prefill_len[admitted]
                plan = StepPlan()
                plan.prefill, plan.chunk = admitted, chunk
                plan.completes = np.ones(len(admitted), dtype=bool)
                return plan
        plan = StepPlan()
        decode = self._decoding()
        if len(decode):
            decode = self._grow(decode, method, plan)
        if not plan.preempted and self.swapped:
            decode = np.concatenate([decode, self._swap_in(method, plan, len(decode), now)])
        plan.decode = decode
        return plan

    def _plan_chunked(self, method: EngineHooks, now: float) -> StepPlan:
        plan = StepPlan()
        budget = self.token_budget
        decode = self._decoding()
        if len(decode):
            decode = self._grow(decode, method, plan)
            if self.v1:
                plan.spec_cap, budget = _truncate_drafts(method.target_tokens(decode), budget)
            else:
                budget -= len(decode)
        if not self.v1 and not plan.preempted and self.swapped:
            back = self._swap_in(method, plan, len(self.running), now)
            decode = np.concatenate([decode, back])
            budget -= len(back)  # a swapped-in decode counts one token, as any decode in V0
        plan.decode = decode
        prefill, chunk = self._continue_prefills(method, budget)
        budget -= isum(chunk)
        if not (self.v1 and plan.preempted):
            new, new_chunk = self._admit_chunks(method, budget, now)
            prefill, chunk = np.concatenate([prefill, new]), np.concatenate([chunk, new_chunk])
        t = self.table
        plan.prefill, plan.chunk = prefill, chunk
        plan.completes = t.computed[prefill] + chunk >= t.prefill_len[prefill]
        computed = method.computes_chunks(prefill, decode) if len(prefill) else None
        if computed is not None and not computed.all():
            _leave_uncomputed(plan, computed)
        return plan

    # -- KV growth and preemption ---------------------------------------------------------

    def _grow(self, decode: np.ndarray, method: EngineHooks, plan: StepPlan) -> np.ndarray:
        """Grow the KV of the decoding requests that allocate this step; preempt when short. As
        vLLM 0.9.2's `Scheduler._schedule_running` asks `can_append_slots`, each request in
        running order needs free blocks for every block its append touches (`KVPools.touched`),
        so a pool exactly full preempts even where no request needs a new block; vllm-v1
        preempts only for the new blocks a request needs. Returns the decoding requests that
        keep running."""
        t, kv = self.table, self.kv
        slots = method.allocating(decode)
        if slots is None:
            slots = decode
        # MineDraft's skipped appends: vLLM V0 checks `can_append_slots` before the patch skips
        checked = decode if method.checks_skipped and not self.v1 else slots
        also = 0   # the most blocks a skipped decode's append would touch
        if len(checked) > len(slots):
            appending = np.zeros(t.capacity, dtype=bool)   # a mask, not np.isin: steps are small
            appending[slots] = True
            skipped = checked[~appending[checked]]
            also = int(kv.touched(skipped, t.kv_len[skipped] + method.lookahead).max(initial=0))
        if kv.ensure(slots, t.kv_len[slots], method.lookahead, touched=not self.v1, also=also):
            return decode
        tokens = t.kv_len[slots] + method.lookahead
        need = np.zeros(t.capacity, dtype=np.int64)
        need[slots] = kv.extra_needed(slots, tokens)
        touch = np.zeros(t.capacity, dtype=np.int64)   # 0: no check for requests not checked
        touch[checked] = (need[checked] if self.v1
                          else kv.touched(checked, t.kv_len[checked] + method.lookahead))
        queue = deque(decode.tolist())
        kept: list[int] = []
        while queue:
            r = queue.popleft()
            while touch[r] > kv.free:
                victim = queue.pop() if queue else r
                self._preempt(victim, method, plan)
                if victim == r:
                    break
            else:
                if need[r]:
                    kv.grow(np.array([r]), np.array([need[r]]))
                kept.append(r)
        allocated = slots[np.isin(slots, kept)]
        kv.write(allocated, t.kv_len[allocated])
        return np.array(kept, dtype=np.int64)

    def _preempt(self, r: int, method: EngineHooks, plan: StepPlan) -> None:
        t, kv = self.table, self.kv
        slots = np.array([r])
        self.running = self.running[self.running != r]
        held = int(kv.held[r])
        if self.swap and t.state[r] == DECODING and self.swap_used + held <= self.swap_capacity:
            self._cpu_blocks[r] = held
            self.swap_used += held
            plan.swap_blocks += held
            t.state[r] = SWAPPED
            self.swapped.append(r)
        else:
            t.state[r] = WAITING
            t.prefill_len[r] = t.kv_len[r]  # recompute prompt and output so far
            t.computed[r] = 0
            t.recomputed[r] += t.kv_len[r]
            self.preempted_now.append(r)
        method.left(slots)
        kv.release(slots)
        t.preemptions[r] += 1
        self.preemptions += 1
        plan.preempted += 1

    def _requeue_preempted(self) -> None:
        """The step's recompute victims join the front of the waiting queue, each ahead of the one
        before, once the step is planned: vLLM 0.9.2's `Scheduler._schedule_chunked_prefill`
        puts them back (`waiting.extendleft`) after `_schedule_prefills`, so a prompt preempted
        in a step is not admitted again in that step."""
        for r in self.preempted_now:
            self.waiting.appendleft(r)
        self.preempted_now.clear()

    def _swap_in(self, method: EngineHooks, plan: StepPlan, seats_taken: int, now: float) -> np.ndarray:
        """Swapped requests come back (FIFO) while seats and blocks above the watermark last. As
        vLLM 0.9.2's `BlockSpaceManager.can_swap_in` counts them, a request needs the blocks of
        all its tokens, the one this step computes and the lookahead slots included; it gets its
        swapped-out blocks back and then, as `Scheduler._schedule_swapped` appends its slots, the
        new blocks those tokens reach. A request whose blocks exceed the pool less the watermark
        never comes back: it ends ignored (`can_swap_in` answers NEVER)."""
        t, kv = self.table, self.kv
        back: list[int] = []
        while self.swapped and seats_taken + len(back) < self.max_running:
            r = self.swapped[0]
            blocks = int(self._cpu_blocks[r])
            needed = max(blocks, kv.blocks_for(int(t.kv_len[r]) + method.lookahead))
            if not kv.fits_ever(needed):
                self._leave_swap_space(r)
                self._reject(r, now)
                continue
            if not kv.can_admit(needed):
                break
            self._leave_swap_space(r)
            kv.grow(np.array([r]), np.array([needed]))
            kv.write(np.array([r]), t.kv_len[r])
            plan.swap_blocks += blocks
            back.append(r)
        slots = np.array(back, dtype=np.int64)
        if back:
            self.table.state[slots] = DECODING
            self.running = np.concatenate([self.running, slots])
            method.resumed(slots)
        return slots

    def _leave_swap_space(self, r: int) -> None:
        """A swapped request leaves the swap queue and frees its CPU blocks."""
        self.swapped.remove(r)
        self.swap_used -= int(self._cpu_blocks[r])
        self._cpu_blocks[r] = 0

    # -- admission ------------------------------------------------------------------------

    def _reject(self, r: int, now: float) -> None:
        """A request the KV pool can never hold, at admission or swap-in (vLLM: FINISHED_IGNORED)."""
        self.table.state[r] = REJECTED
        self.table.end_s[r] = now
        self.table.retire([r])
        self.ended += 1

    def _admit_whole(self, method: EngineHooks, now: float) -> np.ndarray:
        """vLLM V0 `_schedule_prefills` without chunking: whole prompts, FCFS."""
        if len(self.running) >= self.max_running or not self.waiting:
            return EMPTY
        t, kv = self.table, self.kv
        chosen: list[int] = []
        blocks_taken = tokens = 0
        while self.waiting and len(self.running) + len(chosen) < self.max_running:
            r = self.waiting.head()
            n = int(t.prefill_len[r])
            blocks = kv.blocks_for(n)
            if not kv.fits_ever(blocks):
                self.waiting.popleft()
                self._reject(r, now)
                continue
            if tokens + n > self.token_budget or kv.free - blocks_taken - blocks < kv.watermark:
                break
            self.waiting.popleft()
            chosen.append(r)
            tokens += n
            blocks_taken += blocks
        slots = np.array(chosen, dtype=np.int64)
        if chosen:
            kv.grow(slots, kv.blocks_for(t.prefill_len[slots]))
            kv.write(slots, t.prefill_len[slots])
            self._start(slots, now, method, mixed=False)
        return slots

    def _start(self, slots: np.ndarray, now: float, method: EngineHooks, mixed: bool) -> None:
        t = self.table
        t.state[slots] = PREFILLING
        self.prefilling += len(slots)
        fresh = np.isnan(t.admitted_s[slots])
        t.admitted_s[slots[fresh]] = now
        self.running = np.concatenate([self.running, slots])
        method.admitted(slots, mixed)

    def _continue_prefills(self, method: EngineHooks, budget: int) -> tuple[np.ndarray, np.ndarray]:
        """Running partial prefills take their next chunks (in running order)."""
        t, kv = self.table, self.kv
        prefilling = self.running[t.state[self.running] == PREFILLING]
        if not len(prefilling):
            return EMPTY, EMPTY
        slots: list[int] = []
        chunks: list[int] = []
        for r in prefilling.tolist():
            chunk = min(int(t.prefill_len[r] - t.computed[r]), budget)
            if chunk <= 0:
                break
            extra = int(kv.extra_needed(np.array([r]), np.array([t.computed[r] + chunk]))[0])
            if extra > kv.free:
                continue
            kv.grow(np.array([r]), np.array([extra]))
            # vllm-v0 wrote the whole prompt at admission: its chunks take no blocks, write nothing
            kv.write(np.array([r]), max(int(kv.written[r]), int(t.computed[r]) + chunk))
            slots.append(r)
            chunks.append(chunk)
            budget -= chunk
        return np.array(slots, dtype=np.int64), np.array(chunks, dtype=np.int64)

    def _admit_chunks(self, method: EngineHooks, budget: int, now: float) -> tuple[np.ndarray, np.ndarray]:
        """New prompts start prefilling in chunks within the remaining budget (FCFS). vllm-v0
        admits a prompt only when the blocks of all its tokens fit and takes them at its first
        chunk (vLLM 0.9.2's `Scheduler._schedule_prefills` asks `BlockSpaceManager.can_allocate`,
        and `allocate` builds the whole prompt's block table); vllm-v1 takes the first chunk's
        blocks (`KVCacheManager.allocate_slots` for the tokens it computes)."""
        t, kv = self.table, self.kv
        slots: list[int] = []
        chunks: list[int] = []
        while self.waiting and budget > 0 and len(self.running) < self.max_running:
            r = self.waiting.head()
            if not kv.fits_ever(kv.blocks_for(int(t.prefill_len[r]))):
                self.waiting.popleft()
                self._reject(r, now)
                continue
            chunk = min(int(t.prefill_len[r]), budget)
            allocated = chunk if self.v1 else int(t.prefill_len[r])
            blocks = kv.blocks_for(allocated)
            if not kv.can_admit(blocks):
                break
            self.waiting.popleft()
            one = np.array([r])
            self._start(one, now, method, mixed=True)
            kv.grow(one, np.array([blocks]))
            kv.write(one, allocated)
            slots.append(r)
            chunks.append(chunk)
            budget -= chunk
        return np.array(slots, dtype=np.int64), np.array(chunks, dtype=np.int64)

    # -- closing a step -------------------------------------------------------------------

    def close_step(self, plan: StepPlan, now: float, method: EngineHooks) -> tuple[np.ndarray, np.ndarray]:
        """Record prefill progress, then retire finished and aborted requests. Returns
        (finished slots, aborted slots)."""
        t = self.table
        if len(plan.uncomputed):
            t.computed[plan.uncomputed] += plan.marked
        if len(plan.prefill):
            t.computed[plan.prefill] += plan.chunk
            grads = plan.prefill[plan.completes]
            if len(grads):
                t.state[grads] = DECODING
                self.prefilling -= len(grads)
                t.computed[grads] = 0
                method.graduated(grads)
        finished = EMPTY
        if t.completed:
            # each emit's requests are distinct and emits of a step are disjoint: sorting is enough
            done = t.completed
            finished = np.sort(done[0]) if len(done) == 1 else np.unique(np.concatenate(done))
            t.completed.clear()
            t.finish_s[finished] = now
            self._leave_running(finished, FINISHED, now, method)
        aborted = self._cancel(t.due_cancels(now), now, method)
        return finished, aborted

    def _leave_running(self, slots: np.ndarray, state: int, now: float, method: EngineHooks) -> None:
        t = self.table
        self.prefilling -= int(np.count_nonzero(t.state[slots] == PREFILLING))
        t.state[slots] = state
        t.end_s[slots] = now
        method.left(slots)
        self.kv.release(slots)
        keep = t.state[self.running]
        self.running = self.running[(keep == DECODING) | (keep == PREFILLING)]
        t.retire(slots)
        self.ended += len(slots)

    def _cancel(self, due: list[int], now: float, method: EngineHooks) -> np.ndarray:
        """Abort the cancelled requests that have not ended, wherever they are (vLLM's
        `abort_seq_group` searches the waiting, running and swapped queues)."""
        if not due:
            return EMPTY
        t = self.table
        slots = np.array(due, dtype=np.int64)
        running = slots[(t.state[slots] == DECODING) | (t.state[slots] == PREFILLING)]
        if len(running):
            self._leave_running(running, ABORTED, now, method)
        for r in slots[(t.state[slots] == WAITING) | (t.state[slots] == SWAPPED)].tolist():
            if t.state[r] == SWAPPED:
                self._leave_swap_space(r)
            else:
                self.waiting.remove(r)
            t.state[r] = ABORTED
            t.end_s[r] = now
            t.retire([r])
            self.ended += 1
        return slots


def scheduler_for(s: Scenario, table: RequestTable, kv: KVPools, swap_blocks: int,
                  max_running: int) -> Scheduler:
    """The scheduler the scenario's engine settings ask for, over `table` and `kv`."""
    return Scheduler(table, kv, version=s.scheduler, chunked=s.chunked_prefill,
                     swap=s.preemption_mode == "swap", swap_blocks=swap_blocks, max_running=max_running,
                     token_budget=s.max_num_batched_tokens)


class EngineHooks:
    """What the scheduler asks of a method, with the defaults of methods that keep no
    per-request state of their own (AR, SD). PSD overrides them (sim/methods/sub_batching.py)."""

    lookahead: int = 0  # KV slots beyond the context a decode needs (k when drafts are scored)
    checks_skipped = False  # vllm-v0 checks the blocks of decodes `allocating` leaves out too

    def planning(self) -> None:
        """A step is about to be planned: a method that chooses how it runs each step (the
        adaptive mode) chooses here, so that the hooks the plan asks answer for that choice."""

    def allocating(self, decode: np.ndarray) -> np.ndarray | None:
        """The decoding requests that grow their KV this step (None = all of `decode`)."""
        return None

    def target_tokens(self, slots: np.ndarray) -> np.ndarray:
        """Target tokens each decode scores this step (vllm-v1 counts them against the budget)."""
        return np.full(len(slots), 1 + self.lookahead, dtype=np.int64)

    def admitted(self, slots: np.ndarray, mixed: bool) -> None:
        """Requests entered the running set (mixed: with chunked prefill)."""

    def left(self, slots: np.ndarray) -> None:
        """Requests left the running set (finished, aborted, preempted, swapped out); their
        state already says where they went."""

    def resumed(self, slots: np.ndarray) -> None:
        """Swapped-out requests came back, decoding."""

    def graduated(self, slots: np.ndarray) -> None:
        """Requests finished their prefill and start decoding."""

    def computes_chunks(self, prefill: np.ndarray, decode: np.ndarray) -> np.ndarray | None:
        """Which of the step's planned prompt chunks (`prefill`, beside the decodes `decode`) the
        target computes: a bool per chunk, or None for all of them (every method but PSD)."""
        return None


def _leave_uncomputed(plan: StepPlan, computed: np.ndarray) -> None:
    """Take the chunks the target does not compute out of the plan's work. As MineDraft's engine
    does (`LLMEngine._process_model_outputs` skips outputs whose token is -1, and the worker pads
    the drafted sub-batch's rows with -1), a prompt's last chunk is then not marked computed
    (it is scheduled again), but an earlier one is, although nothing computed its KV."""
    left = ~computed
    plan.uncomputed = plan.prefill[left]
    plan.marked = np.where(plan.completes[left], 0, plan.chunk[left])
    plan.prefill, plan.chunk = plan.prefill[computed], plan.chunk[computed]
    plan.completes = plan.completes[computed]


def _truncate_drafts(tokens: np.ndarray, budget: int) -> tuple[np.ndarray, int]:
    """vllm-v1: every decode needs one token; what is left of the budget goes to draft tokens,
    in running order, and draft tokens are what gets cut when it runs short (decodes are never
    starved, so a budget below one token per decode is exceeded). Returns (draft-token cap per
    decode, budget left)."""
    total = int(tokens.sum())
    if total <= budget:
        return tokens - 1, budget - total
    wanted = tokens - 1
    spare = max(0, budget - len(tokens))
    before = np.cumsum(wanted) - wanted          # drafts granted to earlier decodes, uncapped
    caps = np.clip(spare - before, 0, wanted)
    return caps, max(0, budget - len(tokens) - int(caps.sum()))
