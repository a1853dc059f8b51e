"""`ar`: plain autoregressive decoding on the verifier group, one token per request per step.

Quiet stretches: between one request's admission or end and the next, AR's steps are the same
decode step over the same running set, each request one token longer than at the step before,
with no draw of chance. The scheduler plans such a stretch at once (sim/quiet.py) and
`quiet_steps` prices, books and records each of its steps as `step` does (the same helpers, step
after step), while the request table's work (one token each, the verification logs) and the KV
growth are done once for the whole stretch; the results are the same, bit for bit
(tests/sim/test_quiet_stretches.py).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np

from psdsim.sim.clock import Clock
from psdsim.sim.costs import NO_CHUNKS, Chunks
from psdsim.sim.devices import wait_until
from psdsim.sim.methods.common import EngineMethod, record, verify_outcome
from psdsim.sim.methods.passes import TargetPass, book_after_pass, chunk_work
from psdsim.sim.quiet import plan_stretch
from psdsim.sim.records import StepRecord
from psdsim.sim.scheduler import StepPlan


class AutoRegressive(EngineMethod):

    def step(self, plan: StepPlan) -> Generator[Any, Any, None]:
        sim, rec = self.sim, StepRecord()
        slots, env, start = plan.decode, sim.env, sim.env.now
        batch = len(slots)
        target, end = self._priced(plan, rec, start, batch, sim.table.context(slots), chunk_work(sim, plan))
        yield from wait_until(env, end)
        verify_outcome(sim, rec, slots, np.zeros(batch, dtype=np.int64), 0)
        self._recorded(plan, rec, start, batch, target)

    def _priced(self, plan: StepPlan, rec: StepRecord, start: float, batch: int, context: int,
                chunks: Chunks) -> tuple[TargetPass, float]:
        """The step's target pass booked from `start`, then the driver's work: (the pass, the
        step's end)."""
        sim = self.sim
        target = TargetPass(sim, batch, batch, context, chunks, over_link=False)
        target.label("decode" if batch else "prefill")
        back = target.book(start)
        return target, book_after_pass(sim, plan, rec, chunks, batch, False, back, back, reject_on=None,
                                       emitting=batch)

    def _recorded(self, plan: StepPlan, rec: StepRecord, start: float, batch: int,
                  target: TargetPass) -> None:
        target.measured(rec)
        rec.verified = rec.scored = batch
        record(self.sim, plan, start, rec)

    def quiet_steps(self, plan: StepPlan) -> int:
        """Run the quiet stretch that starts with `plan` (already planned; sim/quiet.py), each
        step priced and recorded as `step` does it; returns the steps run, 0 where `plan` does
        not start one (or the run needs each step's events: a SimPy run, a timeline)."""
        sim = self.sim
        clock = sim.env
        if not isinstance(clock, Clock) or sim.timeline is not None:
            return 0
        stretch = plan_stretch(sim.scheduler, plan, self.lookahead)
        if stretch is None:
            return 0
        slots = stretch.slots
        batch, context = len(slots), sim.table.context(slots)
        done = 0
        while done < stretch.steps:
            planned = stretch.plan(done, clock.now)
            if planned is None:
                break
            plan = planned
            rec, start = StepRecord(), clock.now
            target, clock.now = self._priced(plan, rec, start, batch, context + done * batch, NO_CHUNKS)
            rec.generated = batch
            self._recorded(plan, rec, start, batch, target)
            done += 1
            if stretch.cancel_due(clock.now):
                break
        none = np.zeros(batch, dtype=np.int64)
        for _ in range(done):
            sim.table.log_verification(slots, none, none)
        stretch.settle(done, clock.now, self, plan)
        return done
