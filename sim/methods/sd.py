"""`sd`: standard speculative decoding, the draft model co-located on the verifier GPUs.

vLLM V0's SpecDecodeWorker with the draft at TP=1 on GPU 0 of the verifier group (MineDraft's
sequential baseline): each step drafts k tokens for every running request, then the target
scores them, then rejection sampling; m requests run.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np

from sim.devices import VerifyJob
from sim.methods.common import SimContext, prefill_step, verify_outcome
from sim.records import DECODE, StepRecord
from sim.scenario import Scenario


class StandardSD:
    uses_drafter = True

    @staticmethod
    def running_cap(s: Scenario) -> int:
        return s.m

    @staticmethod
    def gpus(s: Scenario) -> int:
        return s.tensor_parallel_size

    def __init__(self, ctx: SimContext) -> None:
        self.ctx = ctx

    def admitted(self, ids: np.ndarray) -> None:
        pass

    def retired(self, ids: np.ndarray) -> None:
        pass

    def prefill(self, ids: np.ndarray) -> Generator[Any, Any, None]:
        n = len(self.ctx.scheduler.running)
        yield from prefill_step(self.ctx, ids, with_draft=True, over_link=False, batch_sizes=(n, 0))

    def decode(self) -> Generator[Any, Any, None]:
        ctx = self.ctx
        env, cost, k = ctx.env, ctx.cost, ctx.scenario.k
        ids = ctx.scheduler.running
        batch = len(ids)
        context = ctx.table.context(ids)
        start = env.now
        draft_s = cost.draft(batch, k, context)
        yield env.timeout(draft_s)
        tokens = batch * (k + 1)
        job = VerifyJob(cost.verify(batch, tokens, context))
        yield ctx.verifier.submit(job)
        yield env.timeout(cost.reject(tokens) + cost.overhead)
        ctx.drafter_busy_s += draft_s
        out = verify_outcome(ctx, ids, np.full(batch, k, dtype=np.int64), batch * k)
        ctx.steps.append(StepRecord(
            DECODE, start, env.now, False, batch, batch, 0, batch, 0, tokens, out.proposed,
            out.accepted, out.generated, draft_s, job.compute_s, 0.0, 0.0, 0.0))
