"""`ar`: plain autoregressive decoding on the verifier group, one token per request per step."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
from psdsim.sim.methods.common import EngineMethod, record, verify_outcome
from psdsim.sim.methods.passes import TargetPass, after_pass, chunk_work
from psdsim.sim.records import StepRecord
from psdsim.sim.scheduler import StepPlan


class AutoRegressive(EngineMethod):
    uses_drafter = False

    def step(self, plan: StepPlan) -> Generator[Any, Any, None]:
        ctx, st = self.ctx, StepRecord()
        ids, start = plan.decode, ctx.env.now
        batch = len(ids)
        chunks = chunk_work(ctx, plan)
        target = TargetPass(ctx, batch, batch, ctx.table.context(ids), chunks, over_link=False)
        yield target.submit("decode" if batch else "prefill")
        yield from after_pass(ctx, plan, st, chunks, batch, False, ctx.env.now, reject_on=None,
                              emitting=batch)
        verify_outcome(ctx, st, ids, np.zeros(batch, dtype=np.int64), 0)
        target.measured(st)
        st.verified = st.scored = batch
        record(ctx, plan, start, st)
