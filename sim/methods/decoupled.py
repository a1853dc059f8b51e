"""`decoupled`: one verifier replica's step under a decoupled drafter service (M:N).

The replica is a TP group with its own scheduler and KV (sim/decoupled_run.py builds V of them);
its drafts come from D drafter GPUs that every replica shares over one link
(sim/drafter_service.py: the service, the accepted-length pmf, the likely lengths). Our reading
of vLLM RFC #42109 and Saguaro (docs/methods.md, "A decoupled drafter service"), step by step:

1. The draft model's prompt pass over the step's prefill chunks is booked on the service, beside
   the target's; it fills the draft KV the next drafts read, so the step ends once both have.
2. A decoding request with no drafts prepared (its first decode, or back after a preemption) is
   drafted now, on the critical path, as SD drafts.
3. The service drafts the next round for the `service_branches` (b) accepted lengths most probable
   under the acceptance model, for every verified request, beside the pass: b rows a request,
   each reading its request's cache (no prefix shared between branches: an upper bound on cost).
4. The target pass: inputs broadcast over the shared link, compute, the sampler output back to
   the service over the link, rejection sampling and the framework on the replica's driver.
5. A request whose accepted length is one of the b is a hit: its next drafts are ready once the
   branch drafting ends. The others are misses, drafted again for the outcome that came out, after
   both, on the critical path. Branches not taken are waste.

Every booking on the service and on the link is made at the simulated time it is submitted (the
step waits until then first), so that verifiers are served first come first served in time
order: the queueing at a shared drafter and the link's contention. The bonus token is taken as
guessed, so the hit rate is an upper bound (the RFC's cache key holds it).
"""

from __future__ import annotations

from array import array
from collections.abc import Generator
from typing import Any

import numpy as np

from psdsim.sim.devices import TO_DRAFTER, wait_until
from psdsim.sim.drafter_service import DrafterService, likely_lengths
from psdsim.sim.layout import layout_for
from psdsim.sim.methods.common import EngineMethod, SimContext, draft_counts, emit_outcome, record
from psdsim.sim.methods.passes import TargetPass, book_after_pass, chunk_work
from psdsim.sim.numbers import isum
from psdsim.sim.records import StepRecord
from psdsim.sim.scenario import Scenario
from psdsim.sim.scheduler import StepPlan
from psdsim.sim.timeline import DRAFT_PREFILL, drafter_track

# The method's own step columns: what the service did for the step.
SERVICE_COLUMNS = ("replica", "drafts_prepared", "drafts_missed", "drafts_wasted", "drafter_queue_s")


class DecoupledReplica(EngineMethod):
    """One verifier replica of a decoupled service; `service` is shared by all replicas."""

    shares_drafters = True

    def __init__(self, sim: SimContext, service: DrafterService, replica: int) -> None:
        super().__init__(sim)
        s = sim.scenario
        self.service, self.replica = service, replica
        mean = sim.table.acceptance_mean
        self.likely = np.zeros(s.k + 1, dtype=bool)   # by accepted length: were its drafts prepared?
        self.likely[list(likely_lengths(mean if mean is not None else 0.0, s.k, s.service_branches))] = True
        self.prepared = np.zeros(sim.table.capacity, dtype=bool)   # per slot: next drafts ready
        sim.table.track(self, "prepared")
        self._columns = {name: array("d" if name == "drafter_queue_s" else "q") for name in SERVICE_COLUMNS}
        self._queue_s = 0.0   # the step's seconds queued at the service

    @staticmethod
    def needs_events(s: Scenario) -> bool:
        return True   # V replicas interleave in simulated time

    @staticmethod
    def gpus(s: Scenario) -> int:
        return layout_for(s).gpus

    def left(self, slots: np.ndarray) -> None:
        """A request that leaves the running set loses its prepared drafts (a preempted one's
        draft KV is recomputed with its prompt)."""
        self.prepared[slots] = False

    def step(self, plan: StepPlan) -> Generator[Any, Any, None]:
        """One step of this replica, steps 1-5 of the module's docstring in order."""
        sim, rec = self.sim, StepRecord()
        s, cost, table, env = sim.scenario, sim.cost, sim.table, sim.env
        start = env.now
        slots = plan.decode
        batch = len(slots)
        context, chunks = table.context(slots), chunk_work(sim, plan)
        self._queue_s = 0.0
        prepared = missed = 0
        prefilled = start
        if chunks.tokens:
            prefilled = self._book(rec, cost.draft_chunks(chunks), DRAFT_PREFILL, len(plan.prefill), 0,
                                   critical=False)
        proposed = np.zeros(batch, dtype=np.int64)
        ahead_end = start
        if batch:
            proposed = draft_counts(plan, slots, np.full(batch, s.k, dtype=np.int64))
            cold = slots[~self.prepared[slots]]
            if len(cold):
                drafting = cost.draft(len(cold), s.k, table.context(cold))
                end = self._book(rec, drafting, "draft", len(cold), s.k)
                yield from wait_until(env, end)
            b = s.service_branches
            prepared = batch * b
            ahead_end = self._book(rec, cost.draft(prepared, s.k, b * context), "draft ahead", prepared, s.k,
                                   critical=False)
            rec.drafted, rec.parallelised = batch, not len(cold)
        total = isum(proposed)
        tokens = total + batch
        target = TargetPass(sim, batch, tokens, context, chunks, over_link=True)
        target.label("verify" if batch else "prefill", k=s.k if batch else None)
        output, target.job.output = target.job.output, ()
        computed = target.book(target.prepared(rec, env.now))
        yield from wait_until(env, computed)   # the output is sent when the pass has ended
        delay, target.job.output_s = sim.link.reserve(TO_DRAFTER, output, env.now)
        back = env.now + delay
        end = book_after_pass(sim, plan, rec, chunks, tokens, bool(batch), back, back, reject_on=None,
                              emitting=batch)
        yield from wait_until(env, max(end, ahead_end, prefilled))
        if batch:
            accepted = sim.acceptance.accepted(table.log_acceptance[slots], proposed) if total else proposed
            emit_outcome(sim, rec, slots, proposed, total, accepted)
            going = table.kv_len[slots] < table.final_len[slots]   # decodes again
            hit = self.likely[accepted]
            redo = slots[going & ~hit]
            missed = len(redo)
            if missed:
                seconds = cost.draft(missed, s.k, table.context(redo))
                end = self._book(rec, seconds, "draft (missed)", missed, s.k)
                yield from wait_until(env, end)
            self.prepared[slots[going]] = True
            prepared_used = int(np.count_nonzero(going & hit))
        else:
            prepared_used = 0
        target.measured(rec)
        rec.verified, rec.scored = batch, tokens if batch else 0
        record(sim, plan, start, rec)
        for name, value in zip(SERVICE_COLUMNS, (self.replica, prepared, missed, prepared - prepared_used,
                                                 self._queue_s), strict=True):
            self._columns[name].append(value)

    def _book(self, rec: StepRecord, seconds: float, name: str, batch: int, k: int,
              critical: bool = True) -> float:
        """Submit `seconds` of drafting to the service now; returns its end. `critical`: the
        step waits for it (its seconds count in the step's draft_s)."""
        now = self.sim.env.now
        booking = self.service.book(now, seconds)
        self._queue_s += booking.wait_s
        if critical:
            rec.draft_s += seconds
        tl = self.sim.timeline
        if tl is not None:
            tl.drafting(drafter_track(booking.server), name, booking.start_s, booking.end_s, batch=batch, k=k,
                        replica=self.replica)
        return booking.end_s

    def step_columns(self) -> dict[str, np.ndarray]:
        """The service's work for each step of this replica (replica index, branches prepared,
        requests whose drafts missed, branches wasted, seconds queued at the service)."""
        return {name: np.array(values) for name, values in self._columns.items()}   # int64, float64
