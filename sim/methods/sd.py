"""Standard speculative decoding: `sd`, and the fair comparisons `sd-2m` and `sd-5gpu`.

`sd` is vLLM V0's SpecDecodeWorker with the draft at TP=1 on GPU 0 of the verifier group
(MineDraft's sequential baseline): each step drafts k tokens for every decoding request, then one
target pass scores them (with any prefill chunks), then the draft model fills its KV for the
step's prompt tokens, then rejection sampling; m requests run.
With `k_policy = "adaptive"` each step drafts k' in 0..k tokens, chosen for the most expected
tokens per second (sim/methods/adaptive.py); 0 skips speculation for the step.
`sd-2m` (memory-fair) runs 2m requests, as many as PSD keeps in flight.
`sd-5gpu` (GPU-fair) gets PSD's extra GPU: as the draft's own GPU (steps stay sequential, and the
inputs and sampler output cross the link as in PSD), or as one more TP rank for the target.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
from psdsim.sim.devices import VerifyJob
from psdsim.sim.layout import layout_for
from psdsim.sim.methods.adaptive import AcceptanceEstimate, best_k
from psdsim.sim.methods.common import (
    EngineMethod,
    SimContext,
    after_verify,
    chunk_work,
    draft_counts,
    emit_first_tokens,
    link_bytes,
    link_seconds,
    record,
    verify_outcome,
)
from psdsim.sim.scenario import Scenario
from psdsim.sim.scheduler import StepPlan
from psdsim.sim.timeline import DRAFTER, ON_DRAFTER


class StandardSD(EngineMethod):
    uses_drafter = True

    def __init__(self, ctx: SimContext) -> None:
        super().__init__(ctx)
        self.over_link = layout_for(ctx.scenario).over_link
        self.after_wait = 1.0   # driver: slowdown after its last wait for the verifier (sim/overlap.py)
        # k_policy = adaptive: the acceptance seen so far prices each step's choice of k
        self.estimate = (AcceptanceEstimate(ctx.table.acceptance_mean)
                         if ctx.scenario.k_policy == "adaptive" else None)


    def step(self, plan: StepPlan) -> Generator[Any, Any, None]:
        ctx = self.ctx
        env, cost, k, tl = ctx.env, ctx.cost, ctx.scenario.k, ctx.timeline
        ids = plan.decode
        batch = len(ids)
        context = ctx.table.context(ids)
        chunks = chunk_work(ctx, plan)
        start = env.now
        if self.estimate is not None and batch:
            k = best_k(cost, batch, context, chunks, k, self.estimate.rate,
                       link_s=link_seconds(ctx, batch, context, chunks) if self.over_link else None)
        proposed = draft_counts(plan, ids, np.full(batch, k, dtype=np.int64))
        draft_s = cost.draft(batch, int(proposed.max()), context) * self.after_wait if batch and k else 0.0
        if draft_s:
            yield env.timeout(draft_s)
            if tl is not None:
                tl.add(DRAFTER, "draft", ON_DRAFTER, start, env.now, batch=batch, k=int(proposed.max()))
        total_proposed = int(proposed.sum())
        tokens = total_proposed + batch
        job = VerifyJob(cost.verify(batch, tokens, context, chunks))
        if self.over_link:
            job.send_bytes, job.return_bytes = link_bytes(ctx, batch, tokens, context, chunks)
        if tl is not None:
            job.name, job.args = ("verify", {"k": k}) if batch else ("prefill", None)
        submitted_at = env.now
        yield ctx.verifier.submit(job)
        # the driver waited for the verifier (a process of its own only in sd-5gpu's drafter layout);
        # rejection sampling is not drafter time here (drafter_busy)
        sync_s, _, swap_s, self.after_wait = yield from after_verify(
            ctx, plan, chunks, tokens, bool(batch) and k > 0, submitted_at, reject_on_drafter=False)
        ctx.drafter_busy_s += draft_s + sync_s
        out = verify_outcome(ctx, ids, proposed, total_proposed)
        if self.estimate is not None and total_proposed:
            self.estimate.update(proposed, ctx.table.last_accepted)
        record(ctx, plan, start, verified=batch, scored=tokens if batch else 0,
               out=out, first_tokens=emit_first_tokens(ctx, plan), draft_s=draft_s + sync_s,
               verify_s=job.compute_s, comm_s=job.transfer_s, link_critical_s=job.transfer_s,
               swap_s=swap_s)


class MemoryFairSD(StandardSD):
    """`sd-2m`: standard SD with PSD's 2m requests running (and their KV)."""

    @staticmethod
    def running_cap(s: Scenario) -> int:
        return 2 * s.m
