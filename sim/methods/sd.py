"""`sd`: standard speculative decoding, the draft model co-located on the verifier GPUs.

vLLM V0's SpecDecodeWorker with the draft at TP=1 on GPU 0 of the verifier group (MineDraft's
sequential baseline): each step drafts k tokens for every decoding request, then one target pass
scores them (with any prefill chunks), then the draft model fills its KV for the prompt tokens
of the step, then rejection sampling; m requests run.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np

from sim.devices import VerifyJob
from sim.methods.common import (
    EngineMethod,
    chunk_work,
    draft_counts,
    emit_first_tokens,
    record,
    verify_outcome,
)
from sim.scenario import Scenario
from sim.scheduler import StepPlan


class StandardSD(EngineMethod):
    uses_drafter = True

    @staticmethod
    def running_cap(s: Scenario) -> int:
        return s.m

    @staticmethod
    def gpus(s: Scenario) -> int:
        return s.tensor_parallel_size

    def step(self, plan: StepPlan) -> Generator[Any, Any, None]:
        ctx = self.ctx
        env, cost, k = ctx.env, ctx.cost, ctx.scenario.k
        ids = plan.decode
        batch = len(ids)
        context = ctx.table.context(ids)
        chunks = chunk_work(ctx, plan)
        start = env.now
        proposed = draft_counts(plan, ids, np.full(batch, k, dtype=np.int64))
        draft_s = cost.draft(batch, int(proposed.max()), context) if batch else 0.0
        if draft_s:
            yield env.timeout(draft_s)
        total_proposed = int(proposed.sum())
        tokens = total_proposed + batch
        job = VerifyJob(cost.verify(batch, tokens, context, chunks))
        yield ctx.verifier.submit(job)
        sync_s = cost.draft_chunks(chunks)
        reject_s = cost.reject(tokens) if batch else 0.0
        swap_s = cost.swap(plan.swap_blocks)
        yield env.timeout(sync_s + reject_s + cost.overhead + swap_s)
        ctx.drafter_busy_s += draft_s + sync_s
        out = verify_outcome(ctx, ids, proposed, total_proposed)
        record(ctx, plan, start, verified=batch, scored=tokens if batch else 0,
               out=out, first_tokens=emit_first_tokens(ctx, plan), draft_s=draft_s + sync_s,
               verify_s=job.compute_s, swap_s=swap_s)
