"""Who drafts a PSD step's sub-batches, and so which time engine runs the step: the two
pipelines of `PipelinedSD`, each a policy over the same step (sim/methods/pipelined.py).

- `DriverDrafting`, MineDraft's pipeline (N = 2, D = 1, docs/reference/paper.md §4.2): the
  driver drafts on drafter 0 within the step, the verified sub-batch first when it has no
  drafts yet (at the start, or after the other one emptied: not parallelised) and the other one
  beside the pass. Nothing runs beside a step, so every part is booked in turn from the step's
  start (passes.booked_step) and the run needs no event queue: the plain clock runs it.
- `RingDrafting`, the ring (any N and D, beyond the paper, docs/design.md §2): D drafter workers
  draft the other non-empty sub-batches in the background, first come first served, across
  steps, and the driver's GPU work after a pass takes a free drafter ahead of queued drafting.
  A step verifies the next sub-batch in turn: at once if its drafts are ready, after them if
  they are being drafted, and after drafting it first when nobody has. Drafting that starts
  while a pass runs may slow it, so the pass and the work after it are waited for in SimPy.

Each says which engine it needs (`events`); the step itself asks the same three things of
either: the verified sub-batch's drafts (`drafts_of`: when they are ready, or an event to wait
for), what to queue when the step starts (`started`), and the pass with the driver's work after
it (`verify`).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from psdsim.sim.costs import Chunks
from psdsim.sim.devices import DraftJob, wait_until
from psdsim.sim.methods.common import draft_rows
from psdsim.sim.methods.passes import (
    Drafting,
    TargetPass,
    book_drafting,
    booked_step,
    drafting_of,
    queue_after_pass,
)
from psdsim.sim.methods.sub_batching import EMPTY
from psdsim.sim.records import StepRecord
from psdsim.sim.scenario import Scenario
from psdsim.sim.scheduler import StepPlan

if TYPE_CHECKING:
    from psdsim.sim.methods.pipelined import PipelinedSD

Ready = tuple[float, simpy.Event | None]   # (when the drafts are ready, or the event of their end)


class DriverDrafting:
    """MineDraft's pipeline: the driver drafts within the step, booked on the plain clock."""

    events = False

    def __init__(self, psd: PipelinedSD, s: Scenario) -> None:
        self.psd = psd

    def started(self, v: int | None, rec: StepRecord) -> None:
        """Nothing is drafted outside the steps."""

    def drafts_of(self, v: int, slots: np.ndarray, context: int, chunks: Chunks, rec: StepRecord,
                  at: float) -> Ready:
        """Drafted beside the last pass (parallelised), else drafted first now, from `at`: all of
        them, or, after a pass that pre-drafted the tail, those whose pre-drafts were thrown away
        (sim/methods/tail.py)."""
        psd, name = self.psd, "draft"
        if psd.sub_batching.drafted(v):
            slots = psd.tail.undrafted(slots) if psd.tail is not None else EMPTY
            if not len(slots):
                rec.parallelised = True
                return at, None
            name, context = "re-draft", psd.sim.table.context(slots)
        sim = psd.sim
        k = psd.draft_length.k(slots, context, chunks, parallel=False)
        psd.proposals[slots] = k   # held once the drafting is done
        return book_drafting(sim, rec, at, drafting_of(sim, rec, slots, k, context, name, v)), None

    def verify(self, plan: StepPlan, rec: StepRecord, target: TargetPass, at: float, v: int | None,
               beside: Drafting | None) -> Generator[Any, Any, None]:
        """The pass from `at`, the other sub-batch drafted `beside` it, booked in turn."""
        verifies = v is not None
        yield from booked_step(self.psd.sim, plan, rec, target, at, verifies, beside, drafter_waits=verifies)


class RingDrafting:
    """The ring: drafter workers draft in the background, in SimPy (see the module docstring)."""

    events = True

    def __init__(self, psd: PipelinedSD, s: Scenario) -> None:
        self.psd = psd
        self.ready = [False] * s.sub_batches            # a sub-batch's drafts are done
        self.drafting: dict[int, simpy.Event] = {}      # ... and the end of those being drafted
        self.open: StepRecord | None = None             # the record of the step under way

    def started(self, v: int | None, rec: StepRecord) -> None:
        """Queue every other non-empty sub-batch without drafts for the drafter workers; also
        the record's split: `batch0` is the verified sub-batch and `batch1` the others."""
        self.open = rec
        members = self.psd.sub_batching.members
        decoding = sum(len(m) for m in members)
        rec.batch0 = len(members[v]) if v is not None else 0
        rec.batch1 = decoding - rec.batch0
        if v is None:
            return
        n = len(members)
        for i in range(1, n):
            b = (v + i) % n
            if len(members[b]) and not self.ready[b] and b not in self.drafting:
                self.drafting[b] = self.psd.drafter.queue(self._draft_job(b), urgent=False)
                rec.drafted += len(members[b])

    def drafts_of(self, v: int, slots: np.ndarray, context: int, chunks: Chunks, rec: StepRecord,
                  at: float) -> Ready:
        """Ready (parallelised), being drafted (parallelised: wait for them), or drafted first
        now by the first free drafter."""
        if v in self.drafting:
            rec.parallelised = True
            return at, self.drafting[v]
        if self.ready[v]:
            rec.parallelised = True
            return at, None
        return at, self.psd.drafter.queue(self._draft_job(v, rec), urgent=True)

    def verify(self, plan: StepPlan, rec: StepRecord, target: TargetPass, at: float, v: int | None,
               beside: Drafting | None) -> Generator[Any, Any, None]:
        """The pass handed to the verifier in SimPy once the driver's input prep is done, then
        the driver's work after it, its drafter part queued for a free drafter worker."""
        env = self.psd.sim.env
        t = target.prepared(rec, at)
        if target.prep_s:
            yield from wait_until(env, t)
        yield target.queue()
        yield from queue_after_pass(self.psd.sim, plan, rec, target.chunks, target.tokens, v is not None, t,
                                    emitting=target.requests)
        target.measured(rec)
        if v is not None:
            self.ready[v] = False   # its drafts are used up
        self.open = None

    def _draft_job(self, b: int, rec: StepRecord | None = None) -> DraftJob:
        """Drafting sub-batch `b` on a drafter worker, sized with its members when it starts;
        `rec`: the step that waits for it, whose drafting time it is. Its rows include the engine's
        extra row per request whose drafts were all accepted, counted in the extra_rows of the
        step that waits for it, else of the step under way when a drafter takes it up (none
        when that happens while the engine waits for arrivals)."""
        psd = self.psd
        sim, k, drafted, whose = psd.sim, psd.lookahead, [EMPTY], [EMPTY]

        def size() -> tuple[float, dict[str, Any]]:
            drafted[0] = slots = psd.sub_batching.members[b]
            whose[0] = sim.table.request[slots]
            rows = draft_rows(sim, slots, rec if rec is not None else self.open)
            seconds = sim.cost.draft(rows, k, sim.table.context(slots))
            return seconds, {"sub_batch": b, "batch": len(slots), "k": k}

        def finish(seconds: float) -> None:
            # a request that ended while it was drafted may have left its slot to another one
            slots = drafted[0]
            psd.proposals[slots[sim.table.request[slots] == whose[0]]] = k
            self.ready[b] = True
            self.drafting.pop(b, None)
            if rec is not None:
                rec.draft_s += seconds

        return DraftJob(f"draft B{b}", size, finish)


Pipeline = DriverDrafting | RingDrafting


def pipeline_class(s: Scenario) -> type[Pipeline]:
    """MineDraft's pipeline where the scenario runs its Batch Manager, else the ring."""
    return DriverDrafting if s.batch_managed else RingDrafting
