"""`ar`: plain autoregressive decoding on the verifier group, one token per request per step."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np

from sim.devices import VerifyJob
from sim.methods.common import SimContext, prefill_step, verify_outcome
from sim.records import DECODE, StepRecord
from sim.scenario import Scenario


class AutoRegressive:
    uses_drafter = False

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
        yield from prefill_step(self.ctx, ids, with_draft=False, over_link=False, batch_sizes=(n, 0))

    def decode(self) -> Generator[Any, Any, None]:
        ctx = self.ctx
        env, cost = ctx.env, ctx.cost
        ids = ctx.scheduler.running
        batch = len(ids)
        start = env.now
        job = VerifyJob(cost.verify(batch, batch, ctx.table.context(ids)))
        yield ctx.verifier.submit(job)
        yield env.timeout(cost.overhead)
        out = verify_outcome(ctx, ids, np.zeros(batch, dtype=np.int64), 0)
        ctx.steps.append(StepRecord(
            DECODE, start, env.now, False, batch, batch, 0, batch, 0, batch, 0, 0,
            out.generated, 0.0, job.compute_s, 0.0, 0.0, 0.0))
