"""`ar`: plain autoregressive decoding on the verifier group, one token per request per step."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
from psdsim.sim.devices import wait_until
from psdsim.sim.methods.common import EngineMethod, record, verify_outcome
from psdsim.sim.methods.passes import TargetPass, after_pass_end, chunk_work
from psdsim.sim.records import StepRecord
from psdsim.sim.scheduler import StepPlan


class AutoRegressive(EngineMethod):

    def step(self, plan: StepPlan) -> Generator[Any, Any, None]:
        sim, st = self.sim, StepRecord()
        ids, env, start = plan.decode, sim.env, sim.env.now
        batch = len(ids)
        chunks = chunk_work(sim, plan)
        target = TargetPass(sim, batch, batch, sim.table.context(ids), chunks, over_link=False)
        back = target.book("decode" if batch else "prefill", start)
        end = after_pass_end(sim, plan, st, chunks, batch, False, back, back, reject_on=None, emitting=batch)
        yield from wait_until(env, end)
        verify_outcome(sim, st, ids, np.zeros(batch, dtype=np.int64), 0)
        target.measured(st)
        st.verified = st.scored = batch
        record(sim, plan, start, st)
