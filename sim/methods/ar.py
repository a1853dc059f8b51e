"""`ar`: plain autoregressive decoding on the verifier group, one token per request per step."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
from psdsim.sim.devices import VerifyJob
from psdsim.sim.methods.common import EngineMethod, chunk_work, emit_first_tokens, record, verify_outcome
from psdsim.sim.scheduler import StepPlan
from psdsim.sim.timeline import driver_parts


class AutoRegressive(EngineMethod):
    uses_drafter = False

    def step(self, plan: StepPlan) -> Generator[Any, Any, None]:
        ctx = self.ctx
        env, cost = ctx.env, ctx.cost
        ids = plan.decode
        batch = len(ids)
        start = env.now
        job = VerifyJob(cost.verify(batch, batch, ctx.table.context(ids), chunk_work(ctx, plan)))
        if ctx.timeline is not None:
            job.name = "decode" if batch else "prefill"
        yield ctx.verifier.submit(job)
        swap_s = cost.swap(plan.swap_blocks)
        verified_at = env.now
        yield env.timeout(cost.overhead + swap_s)
        if ctx.timeline is not None:
            ctx.timeline.after(verified_at, env.now, driver_parts(cost.overhead, swap_s))
        out = verify_outcome(ctx, ids, np.zeros(batch, dtype=np.int64), 0)
        record(ctx, plan, start, verified=batch, scored=batch, out=out,
               first_tokens=emit_first_tokens(ctx, plan), verify_s=job.compute_s, swap_s=swap_s)
