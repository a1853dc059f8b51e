"""`ar`: plain autoregressive decoding on the verifier group, one token per request per step.

Quiet stretches (issue #15): between one request's admission or end and the next, AR's steps
are the same decode step over the same running set, each request one token longer than at the
step before, with no draw of chance. `quiet_steps` runs such a stretch at once: each step is
still priced, booked and recorded as `step` does it (the same helpers, step after step), but the
request table's work (one token each, the verification logs) and the KV growth the scheduler's
plans would make are done once for the whole stretch. The stretch stops before a step that would
end a request (the normal step does that one), that could admit one, or whose KV growth the pool
would refuse, and after a step at whose end a client cancels; the results are the same, bit for
bit (tests/test_quiet_stretches.py).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
from psdsim.sim.clock import Clock
from psdsim.sim.costs import NO_CHUNKS, Chunks
from psdsim.sim.devices import wait_until
from psdsim.sim.methods.common import EngineMethod, record, verify_outcome
from psdsim.sim.methods.passes import TargetPass, after_pass_end, chunk_work
from psdsim.sim.records import StepRecord
from psdsim.sim.scheduler import StepPlan

# Requests x steps a quiet stretch plans at once (KVPools.ahead holds a matrix of that size, 8 MiB);
# a longer stretch goes on as another one.
STRETCH_CELLS = 1 << 20


class AutoRegressive(EngineMethod):

    def step(self, plan: StepPlan) -> Generator[Any, Any, None]:
        sim, st = self.sim, StepRecord()
        ids, env, start = plan.decode, sim.env, sim.env.now
        batch = len(ids)
        target, end = self._priced(plan, st, start, batch, sim.table.context(ids), chunk_work(sim, plan))
        yield from wait_until(env, end)
        verify_outcome(sim, st, ids, np.zeros(batch, dtype=np.int64), 0)
        self._recorded(plan, st, start, batch, target)

    def _priced(self, plan: StepPlan, st: StepRecord, start: float, batch: int, context: int,
                chunks: Chunks) -> tuple[TargetPass, float]:
        """The step's target pass booked from `start`, then the driver's work: (the pass, the
        step's end)."""
        sim = self.sim
        target = TargetPass(sim, batch, batch, context, chunks, over_link=False)
        target.label("decode" if batch else "prefill")
        back = target.book(start)
        return target, after_pass_end(sim, plan, st, chunks, batch, False, back, back, reject_on=None,
                                      emitting=batch)

    def _recorded(self, plan: StepPlan, st: StepRecord, start: float, batch: int, target: TargetPass) -> None:
        target.measured(st)
        st.verified = st.scored = batch
        record(self.sim, plan, start, st)

    def quiet_steps(self, plan: StepPlan) -> int:
        """Run the quiet stretch that starts with `plan` (already planned); returns the steps run,
        0 where `plan` does not start one (see the module docstring)."""
        sim = self.sim
        sched, table, clock = sim.scheduler, sim.table, sim.env
        if not isinstance(clock, Clock) or sim.timeline is not None or not sched.quiet(plan):
            return 0
        ids = plan.decode
        batch = len(ids)
        lengths = table.kv_len[ids]
        steps = int((table.final_len[ids] - lengths).min()) - 1   # the next step ends a request
        steps = min(steps, STRETCH_CELLS // batch)   # KVPools.ahead's matrix stays small
        if steps < 2:
            return 0
        # the plans of steps 1, 2, ...: every request one token longer at each
        held, used = sched.kv.ahead(ids, lengths + 1, steps - 1, self.lookahead)
        steps = min(steps, len(used) + 1)
        context = table.context(ids)
        done = 0
        while done < steps:
            if done:
                table.arrive_until(clock.now)
                if sched.may_admit():
                    break
                plan = StepPlan()
                plan.decode, plan.kv_blocks, plan.waiting = ids, used[done - 1], len(sched.waiting)
            st, start = StepRecord(), clock.now
            target, clock.now = self._priced(plan, st, start, batch, context + done * batch, NO_CHUNKS)
            st.generated = batch
            self._recorded(plan, st, start, batch, target)
            done += 1
            if table.cancels and table.cancels[0][0] <= clock.now:
                break
        table.kv_len[ids] = lengths + done
        none = np.zeros(batch, dtype=np.int64)
        for _ in range(done):
            table.log_verification(ids, none, none)
        if done > 1:
            sched.kv.settle(ids, held[done - 2], used[done - 2])
        if table.cancels and table.cancels[0][0] <= clock.now:
            sched.close_step(plan, clock.now, self)   # the cancels due at the last step's end
        return done
