"""PSD with N sub-batches and D drafter GPUs: a ring pipeline for drafters slower than the verifier.

Beyond the paper (docs/design.md §2). N x m requests run in N sub-batches; the verifier verifies them
in turn, one per step, while D drafter GPUs draft the others in the background, one sub-batch
each at a time, first come first served. A step verifies the next non-empty sub-batch in the
ring: if its drafts are ready it goes at once; if they are still being drafted the verifier waits
for them; if nobody drafted it (at the start, or after a sub-batch emptied) it is drafted first,
ahead of any queued drafting, and the step waits (not parallelised). At the start of every step
each other non-empty sub-batch without drafts is queued for a drafter, so the sub-batch verified
last step - which refills joined - is drafted next. The driver's GPU work after a verification
(the draft model's prefill of new prompts, rejection sampling) also takes a drafter GPU, ahead of
queued drafting: a drafter GPU does one thing at a time. In steady state a step costs
max(V, drafting / D, drafting / (N - 1)): N = 3 and D = 2 hide drafting up to twice the
verification time, where MineDraft's N = 2, D = 1 hides it up to once (sim/methods/psd.py keeps
that case, with MineDraft's exact semantics).

Simplifications: the driver's GPU work runs on whichever drafter GPU is free first (in MineDraft
it is the drafter GPU); every drafter GPU holds the draft KV of every request (sim/memory.py); KV
is allocated for every running request at every step (no has_deferred patch). In the step table
`batch0` is the verified sub-batch and `batch1` the others.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
import simpy
from psdsim.sim.devices import VerifyJob
from psdsim.sim.methods.common import (
    EngineMethod,
    SimContext,
    chunk_work,
    draft_counts,
    emit_first_tokens,
    link_bytes,
    record,
    verify_outcome,
)
from psdsim.sim.requests import DECODING
from psdsim.sim.scenario import Scenario
from psdsim.sim.scheduler import StepPlan
from psdsim.sim.timeline import DRAFT_PREFILL, ON_DRAFTER, REJECT, drafter_track, driver_parts

EMPTY = np.empty(0, dtype=np.int64)


class RingPSD(EngineMethod):
    uses_drafter = True

    @staticmethod
    def running_cap(s: Scenario) -> int:
        return s.sub_batches * s.m

    def __init__(self, ctx: SimContext) -> None:
        super().__init__(ctx)
        n = ctx.scenario.sub_batches
        self.n = n
        self.flag = np.zeros(len(ctx.table), dtype=np.int64)
        self.flagged = np.zeros(n, dtype=np.int64)     # running requests per sub-batch
        self.members = [EMPTY] * n                      # decoding requests per sub-batch
        self.has_proposals = np.zeros(len(ctx.table), dtype=bool)
        self.ready = [False] * n
        self.drafting: dict[int, simpy.Event] = {}      # sub-batch -> its drafting is done
        # Work awaiting a drafter GPU: urgent (the step waits on it) before background drafting,
        # first come first served within each.
        self.queue = simpy.PriorityStore(ctx.env)
        self.queued = 0
        self.draft_s = [0.0] * n                        # each sub-batch's last drafting time
        self.last_verified: int | None = None
        self.next = 0
        for i in range(ctx.scenario.drafters):
            ctx.env.process(self._drafter(i))

    # -- scheduler hooks ----------------------------------------------------------------

    def admitted(self, ids: np.ndarray, mixed: bool) -> None:
        for r in ids.tolist():
            # refills join the sub-batch drafted next; before any decode, balance the ring
            target = self.last_verified if self.last_verified is not None else int(np.argmin(self.flagged))
            self.flag[r] = target
            self.flagged[target] += 1
        self.has_proposals[ids] = False

    def graduated(self, ids: np.ndarray) -> None:
        flags = self.flag[ids]
        for b in set(flags.tolist()):
            self.members[b] = np.concatenate([self.members[b], ids[flags == b]])

    def resumed(self, ids: np.ndarray) -> None:
        self.admitted(ids, False)
        self.graduated(ids)

    def left(self, ids: np.ndarray) -> None:
        state = self.ctx.table.state
        for b in set(self.flag[ids].tolist()):
            self.flagged[b] -= int(np.count_nonzero(self.flag[ids] == b))
            self.members[b] = self.members[b][state[self.members[b]] == DECODING]
        self.has_proposals[ids] = False

    # -- the drafters -------------------------------------------------------------------

    def _drafter(self, index: int) -> Generator[Any, Any, None]:
        ctx = self.ctx
        tl = ctx.timeline
        while True:
            item = yield self.queue.get()
            _, job = item.item
            began = ctx.env.now
            step = tl.step if tl is not None else 0  # drafting may outlast the step it began in
            if isinstance(job, int):  # a sub-batch to draft
                b = job
                ids = self.members[b]
                seconds = ctx.cost.draft(len(ids), self.lookahead, ctx.table.context(ids))
                yield ctx.env.timeout(seconds)
                if tl is not None:
                    tl.add(drafter_track(index), f"draft B{b}", ON_DRAFTER, began, ctx.env.now, step=step,
                           sub_batch=b, batch=len(ids), k=self.lookahead)
                self.has_proposals[ids] = True
                self.ready[b] = True
                self.draft_s[b] = seconds
                self.drafting.pop(b).succeed()
            else:  # the driver's work: ((track name, seconds), ...) and the event the step waits on
                parts, done = job
                seconds = sum(t for _, t in parts)
                yield ctx.env.timeout(seconds)
                if tl is not None:
                    tl.after(began, ctx.env.now, [(drafter_track(index), name, ON_DRAFTER, t)
                                                  for name, t in parts])
                done.succeed()
            ctx.drafter_busy_s += seconds

    def _submit(self, job: Any, urgent: bool) -> None:
        self.queued += 1
        self.queue.put(simpy.PriorityItem(0 if urgent else 1, (self.queued, job)))

    def _draft(self, b: int, urgent: bool = False) -> simpy.Event:
        self.drafting[b] = self.ctx.env.event()
        self._submit(b, urgent)
        return self.drafting[b]

    def _queue_drafts(self, verified: int) -> int:
        """Queue every other non-empty sub-batch without drafts; returns the requests queued."""
        queued = 0
        for i in range(1, self.n):
            b = (verified + i) % self.n
            if len(self.members[b]) and not self.ready[b] and b not in self.drafting:
                self._draft(b)
                queued += len(self.members[b])
        return queued

    # -- a step -------------------------------------------------------------------------

    def _next_batch(self) -> int | None:
        for i in range(self.n):
            b = (self.next + i) % self.n
            if len(self.members[b]):
                return b
        return None

    def step(self, plan: StepPlan) -> Generator[Any, Any, None]:
        ctx = self.ctx
        env, cost, table, k, tl = ctx.env, ctx.cost, ctx.table, self.lookahead, ctx.timeline
        v = self._next_batch() if len(plan.decode) else None
        verify_ids = self.members[v] if v is not None else EMPTY
        chunks = chunk_work(ctx, plan)
        start = env.now
        queued = self._queue_drafts(v) if v is not None else 0
        draft_s = 0.0
        parallelised = False
        if v is not None:
            if v in self.drafting:           # its drafter is still at it: wait
                yield self.drafting[v]
                parallelised = True
            elif self.ready[v]:
                parallelised = True
            else:                            # nobody drafted it: draft it first, and wait
                yield self._draft(v, urgent=True)
                draft_s = self.draft_s[v]
            verify_ids = self.members[v]     # members left while waiting are gone
        context = table.context(verify_ids)
        proposed = draft_counts(plan, verify_ids, self.has_proposals[verify_ids] * k)
        total_proposed = int(proposed.sum())
        tokens = total_proposed + len(verify_ids)
        job = VerifyJob(cost.verify(len(verify_ids), tokens, context, chunks),
                        *link_bytes(ctx, len(verify_ids), tokens, context, chunks))
        if tl is not None:
            job.name, job.args = ((f"verify B{v}", {"sub_batch": v, "k": k}) if len(verify_ids)
                                  else ("prefill", None))
        yield ctx.verifier.submit(job)
        sync_s = cost.draft_chunks(chunks)
        reject_s = cost.reject(tokens) if len(verify_ids) else 0.0
        swap_s = cost.swap(plan.swap_blocks)
        if sync_s + reject_s:
            done = env.event()
            self._submit((((DRAFT_PREFILL, sync_s), (REJECT, reject_s)), done), urgent=True)
            yield done
        on_cpu = env.now
        yield env.timeout(cost.overhead + swap_s)
        if tl is not None:
            tl.after(on_cpu, env.now, driver_parts(cost.overhead, swap_s))
        self.has_proposals[verify_ids] = False
        out = verify_outcome(ctx, verify_ids, proposed, total_proposed)
        if v is not None:
            self.ready[v] = False
            self.last_verified = v
            self.next = (v + 1) % self.n
        decoding = sum(len(m) for m in self.members)
        record(ctx, plan, start, parallelised=parallelised,
               batches=(len(verify_ids), decoding - len(verify_ids)), verified=len(verify_ids),
               drafted=queued, scored=tokens if len(verify_ids) else 0, out=out,
               first_tokens=emit_first_tokens(ctx, plan), draft_s=draft_s + sync_s,
               verify_s=job.compute_s, comm_s=job.transfer_s, link_critical_s=job.transfer_s,
               swap_s=swap_s)
