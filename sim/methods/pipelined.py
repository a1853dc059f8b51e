"""`psd`, `psd+tetris`: batch-parallel SD, N sub-batches pipelined over D drafter GPUs.

N x m requests run in N sub-batches. Each step verifies one of them while the drafter drafts
others, so drafting hides behind verification. Two choices plug in:

- the refill policy (sim/methods/refill.py): which sub-batch each request joins and which one a
  step verifies. MineDraft's Batch Manager (N = 2, D = 1, docs/reference/paper.md §4.2): the driver
  drafts the other sub-batch beside each pass, within the step, so a step costs
      [draft(S), when S has no proposals yet: init or fallback]
      + max(draft(D), inputs over the link + target pass (verify S, prefill chunks) + output back)
      + the draft model's pass over the step's prompt tokens (to fill its KV) + rejection sampling
      + fixed overhead (+ KV swap time).
  Round robin (the ring, any N and D, beyond the paper, docs/design.md §2): D drafter workers draft the
  other non-empty sub-batches in the background, first come first served, and the driver's GPU
  work after a pass takes a free drafter ahead of queued drafting. A step verifies the next
  sub-batch in turn: at once if its drafts are ready, after them if they are being drafted, and
  after drafting it first when nobody has (at the start, or after a sub-batch emptied). In steady
  state a step costs max(V, drafting / D, drafting / (N - 1)): N = 3 and D = 2 hide drafting up
  to twice the verification time, where MineDraft's N = 2, D = 1 hide it up to once.
- the draft-length policy (sim/methods/draft_length.py): k, adaptive k (MineDraft's pipeline
  only), or TETRIS (k + e drafted, the best k x m scored).

Drafting that overlaps a target pass slows it and is slowed by it where a profile measured
contention, and drafter work after idling is slowed where it measured that (sim/overlap.py),
whichever pipeline runs. A request verified without proposals (refills that joined a sub-batch
after it was drafted) is scored with zero drafts and emits one token: a wasted step. Every
drafter GPU holds the draft KV of every request (sim/memory.py).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy
from psdsim.sim.costs import NO_CHUNKS, Chunks
from psdsim.sim.devices import Drafter, DraftJob, wait_until
from psdsim.sim.methods.common import (
    EngineMethod,
    SimContext,
    draft_counts,
    draft_rows,
    emit_outcome,
    record,
    verify_outcome,
)
from psdsim.sim.methods.draft_length import Selection, draft_length
from psdsim.sim.methods.passes import (
    Drafting,
    TargetPass,
    book_drafting,
    booked_step,
    chunk_work,
    queued_after_pass,
)
from psdsim.sim.methods.refill import EMPTY, BatchManagerRefill, RoundRobinRefill
from psdsim.sim.numbers import isum
from psdsim.sim.records import StepRecord
from psdsim.sim.scenario import Scenario
from psdsim.sim.scheduler import StepPlan


class PipelinedSD(EngineMethod):

    @staticmethod
    def running_cap(s: Scenario) -> int:
        return s.sub_batches * s.m

    @staticmethod
    def needs_events(s: Scenario) -> bool:
        return not s.batch_managed   # the ring's drafter workers draft beside the steps

    def __init__(self, sim: SimContext) -> None:
        super().__init__(sim)
        s, n = sim.scenario, sim.table.capacity
        self.lengths = draft_length(sim)
        self.lookahead = self.lengths.width
        self.refill = (BatchManagerRefill(n, s, self.lookahead) if s.batch_managed
                       else RoundRobinRefill(n, s.sub_batches))
        self.proposals = np.zeros(n, dtype=np.int64)   # drafts each request holds (0: none)
        sim.table.track(self, "proposals")
        sim.table.track(self.refill, "flag")
        self.ready = [False] * s.sub_batches           # background drafting: a sub-batch's drafts are done
        self.drafting: dict[int, simpy.Event] = {}     # ... and the end of those being drafted
        self.open: StepRecord | None = None            # the record of the step under way (the ring)
        # Each sub-batch's members array and their context (KV tokens), kept as a running total:
        # a decoding request's context grows only when it is verified (by the tokens its sub-batch
        # kept, added once the pass is back), and any change of a sub-batch's members replaces its
        # array, so the total holds while the array is the one recorded: two sums saved per step.
        self.contexts: dict[int, tuple[np.ndarray, int]] = {}
        assert sim.drafter is not None
        self.drafter: Drafter = sim.drafter

    # -- scheduler hooks --------------------------------------------------------------------

    def allocating(self, decode: np.ndarray) -> np.ndarray | None:
        return self.refill.allocating(decode)

    def target_tokens(self, ids: np.ndarray) -> np.ndarray:
        tokens = self.refill.target_tokens(ids)
        return super().target_tokens(ids) if tokens is None else tokens

    def computes_chunks(self, prefill: np.ndarray, decode: np.ndarray) -> np.ndarray | None:
        return self.refill.computes_chunks(prefill, decode)

    def admitted(self, ids: np.ndarray, mixed: bool) -> None:
        self.refill.admitted(ids, mixed, restart=len(self.sim.scheduler.running) == len(ids))
        self.proposals[ids] = 0

    def graduated(self, ids: np.ndarray) -> None:
        self.refill.graduated(ids)

    def resumed(self, ids: np.ndarray) -> None:
        self.refill.resumed(ids)
        self.proposals[ids] = 0

    def left(self, ids: np.ndarray) -> None:
        self.refill.left(ids, self.sim.table.state)
        self.proposals[ids] = 0

    # -- a step -----------------------------------------------------------------------------

    def step(self, plan: StepPlan) -> Generator[Any, Any, None]:
        """MineDraft's pipeline prices the step's parts in turn from its start (`t`) and waits
        once, for its end: nothing else runs beside it. The ring waits in SimPy wherever its
        drafter workers may be at work (sim/devices.py)."""
        sim, refill = self.sim, self.refill
        st = self.open = StepRecord()
        env = sim.env
        start = t = env.now
        v, ahead = refill.turn(plan, st)   # the sub-batch verified, the one drafted beside the pass
        ids = refill.members[v] if v is not None else EMPTY
        batch = len(ids)
        context = self._context(v, ids) if v is not None else 0
        chunks = chunk_work(sim, plan)
        background = refill.background
        if background:   # the ring: drafter workers draft the other sub-batches meanwhile
            st.drafted = self._queue_drafts(v, st)
        if v is not None:       # drafted earlier (parallelised), being drafted, or drafted first now
            st.parallelised, drafting, t = self._drafts_of(v, ids, context, chunks, st, t)
            if drafting is not None:
                yield drafting
                t = env.now
        proposed, selection, shift = self._scored(plan, v, ids, st.parallelised)
        total = isum(proposed)
        tokens = total + batch
        target = TargetPass(sim, batch, tokens, context, chunks)
        beside = self._ahead(ahead, st)
        if v is None:
            target.label("prefill")
        else:
            target.label("verify", v, int(proposed.max()) if sim.timeline else 0)
        if background:
            t = target.prepared(st, t)
            if target.prep_s:
                yield from wait_until(env, t)
            yield target.submit()
            yield from queued_after_pass(sim, plan, st, chunks, tokens, v is not None, t, emitting=batch)
            target.measured(st)
        else:   # MineDraft: the driver drafts the other sub-batch while the pass runs
            verifies = v is not None
            yield from booked_step(sim, plan, st, target, t, verifies, beside, drafter_waits=verifies)
        self._verified(v, ahead, ids, proposed, total, selection, shift, st)
        if v is not None:   # st.generated is the verified requests' kept tokens until record()
            self.contexts[v] = (ids, context + st.generated)
        st.verified, st.scored = batch, tokens if v is not None else 0
        record(sim, plan, start, st)
        self.open = None

    def _scored(self, plan: StepPlan, v: int | None, ids: np.ndarray,
                parallelised: bool) -> tuple[np.ndarray, Selection | None, int]:
        """Drafts each verified request has scored (TETRIS's choice, the vllm-v1 cap), TETRIS's
        selection, and how many requests on the verified drafts are shifted (`misaligned`)."""
        proposed = self.proposals[ids]
        selection = self.lengths.select(ids, proposed) if len(ids) else None
        if selection is not None:
            proposed = draft_counts(plan, ids, selection.lengths)  # TETRIS accepts among those scored
            selection = Selection(proposed, selection.accepted)
        elif plan.spec_cap is not None:
            proposed = draft_counts(plan, ids, proposed)
        shift = self.refill.misaligned(ids, parallelised) if v is not None else 0
        if shift:  # swapped-in requests at the end push every proposal `shift` requests on
            return np.concatenate([np.zeros(shift, dtype=np.int64), proposed[:-shift]]), None, shift
        return proposed, selection, 0

    def _verified(self, v: int | None, ahead: int | None, ids: np.ndarray, proposed: np.ndarray, total: int,
                  selection: Selection | None, shift: int, st: StepRecord) -> None:
        """The pass is back: the verified requests' drafts are used up, their tokens emitted."""
        self.proposals[ids] = 0
        if shift:  # drafts scored against another request's sequence: rejected
            emit_outcome(self.sim, st, ids, proposed, total, np.zeros(len(ids), dtype=np.int64))
        elif selection is None:
            verify_outcome(self.sim, st, ids, proposed, total)
            self.lengths.seen(proposed, total)
        else:
            emit_outcome(self.sim, st, ids, proposed, total, selection.leading())
        if v is not None:
            self.ready[v] = False
            self.refill.verified(v, ahead)

    # -- drafting ---------------------------------------------------------------------------

    def _drafts_of(self, v: int, ids: np.ndarray, context: int, chunks: Chunks, st: StepRecord,
                   at: float) -> tuple[bool, simpy.Event | None, float]:
        """The verified sub-batch's drafts, the step being at `at`: (whether they were drafted
        before this step, i.e. parallelised; in the ring, what the step waits for: their drafting,
        or drafting them first now; when the drafting that the driver does first now ends)."""
        if self.refill.background:
            if v in self.drafting:   # its drafter is still at it
                return True, self.drafting[v], at
            if self.ready[v]:
                return True, None, at
            return False, self.drafter.submit(self._draft_job(v, st), urgent=True), at
        if self.refill.drafted(v):
            return True, None, at
        k = self.lengths.k(ids, context, chunks, parallel=False)
        seconds = self.sim.cost.draft(draft_rows(self.sim, ids, st), k, context) * self.drafter.slowdown[0] \
            if k else 0.0
        self.proposals[ids] = k   # held once the drafting is done
        return False, None, book_drafting(self.sim, st, at, Drafting(seconds, "draft", len(ids), k, v))

    def _context(self, b: int, ids: np.ndarray) -> int:
        """The context of sub-batch `b`, whose members are `ids`: the running total while the
        members are those it was counted for, else summed afresh."""
        known = self.contexts.get(b)
        if known is not None and known[0] is ids:
            return known[1]
        context = self.sim.table.context(ids)
        self.contexts[b] = (ids, context)
        return context

    def _ahead(self, ahead: int | None, st: StepRecord) -> Drafting | None:
        """The drafting of sub-batch `ahead` beside the pass (its seconds alone; None: none);
        its requests hold its k drafts once it is done."""
        if ahead is None:
            return None
        sim, ids = self.sim, self.refill.members[ahead]
        context = self._context(ahead, ids)
        k = self.lengths.k(ids, context, NO_CHUNKS, parallel=True)
        self.proposals[ids] = k   # held from when the drafting beside the pass ends
        st.drafted = len(ids)
        seconds = 0.0
        if k:
            seconds = sim.cost.draft(draft_rows(sim, ids, st), k, context) * self.drafter.slowdown[0]
        return Drafting(seconds, "draft", len(ids), k, ahead)

    def _queue_drafts(self, v: int | None, st: StepRecord) -> int:
        """Background drafting: queue every other non-empty sub-batch without drafts for the
        drafter workers; returns the requests queued. Also the record's split: `batch0` is the
        verified sub-batch and `batch1` the others."""
        members = self.refill.members
        decoding = sum(len(m) for m in members)
        st.batch0 = len(members[v]) if v is not None else 0
        st.batch1 = decoding - st.batch0
        if v is None:
            return 0
        queued, n = 0, len(members)
        for i in range(1, n):
            b = (v + i) % n
            if len(members[b]) and not self.ready[b] and b not in self.drafting:
                self.drafting[b] = self.drafter.submit(self._draft_job(b), urgent=False)
                queued += len(members[b])
        return queued

    def _draft_job(self, b: int, st: StepRecord | None = None) -> DraftJob:
        """Drafting sub-batch `b` on a drafter worker, sized with its members when it starts;
        `st`: the step that waits for it, whose drafting time it is. Its rows include the engine's
        extra row per request whose drafts were all accepted, counted in the extra_rows of the
        step that waits for it, else of the step under way when a drafter takes it up (none
        when that happens while the engine waits for arrivals)."""
        k, drafted, whose = self.lookahead, [EMPTY], [EMPTY]

        def size() -> tuple[float, dict[str, Any]]:
            drafted[0] = ids = self.refill.members[b]
            whose[0] = self.sim.table.request[ids]
            rows = draft_rows(self.sim, ids, st if st is not None else self.open)
            return self.sim.cost.draft(rows, k, self.sim.table.context(ids)), \
                {"sub_batch": b, "batch": len(ids), "k": k}

        def finish(seconds: float) -> None:
            # a request that ended while it was drafted may have left its slot to another one
            ids = drafted[0]
            self.proposals[ids[self.sim.table.request[ids] == whose[0]]] = k
            self.ready[b] = True
            self.drafting.pop(b, None)
            if st is not None:
                st.draft_s += seconds

        return DraftJob(f"draft B{b}", size, finish)
