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

from psdsim.sim.methods.common import (
    EngineMethod,
    SimContext,
    draft_counts,
    record,
    verify_outcome,
)
from psdsim.sim.methods.draft_length import draft_length_policy
from psdsim.sim.methods.passes import Drafting, TargetPass, book_drafting, booked_step, chunk_work, drafting_s
from psdsim.sim.numbers import isum
from psdsim.sim.records import StepRecord
from psdsim.sim.scenario import Scenario
from psdsim.sim.scheduler import StepPlan
from psdsim.sim.timeline import DRIVER


class StandardSD(EngineMethod):

    def __init__(self, sim: SimContext) -> None:
        super().__init__(sim)
        self.over_link = sim.layout.over_link
        self.draft_length = draft_length_policy(sim)

    def step(self, plan: StepPlan) -> Generator[Any, Any, None]:
        """Draft, then the target pass scores the drafts, then the driver's work: priced in turn
        from the step's start, waited for once (nothing else runs beside an SD step)."""
        sim, rec = self.sim, StepRecord()
        start = sim.env.now
        slots = plan.decode
        batch = len(slots)
        context, chunks = sim.table.context(slots), chunk_work(sim, plan)
        k = 0
        if batch:
            k = self.draft_length.k(slots, context, chunks, parallel=False, over_link=self.over_link)
        wanted = np.empty(batch, dtype=np.int64)
        wanted.fill(k)   # np.full's Python-level wrapper costs more than the array at a batch's size
        proposed = draft_counts(plan, slots, wanted)
        capped = plan.spec_cap is not None   # else every request drafts k: no reductions needed
        t = start
        if batch and k:   # draft, then the target pass scores the drafts
            drafted = int(proposed.max()) if capped else k
            seconds = drafting_s(sim, rec, slots, drafted, context)
            t = book_drafting(sim, rec, t, Drafting(seconds, "draft", batch, drafted))
        total = isum(proposed) if capped else batch * k
        tokens = total + batch
        target = TargetPass(sim, batch, tokens, context, chunks, over_link=self.over_link)
        if batch:
            target.label("verify", k=k)
        else:
            target.label("prefill")
        # rejection sampling runs on the driver, not the drafter (drafter_busy)
        yield from booked_step(sim, plan, rec, target, t, bool(batch) and k > 0,
                               beside=self._beside(rec, slots, k, context), reject_on=DRIVER)
        verify_outcome(sim, rec, slots, proposed, total)
        self.draft_length.seen(proposed, total)
        rec.verified, rec.scored = batch, tokens if batch else 0
        record(sim, plan, start, rec)

    def _beside(self, rec: StepRecord, slots: np.ndarray, k: int, context: int) -> Drafting | None:
        """Drafter work beside the target pass: none, SD drafts before it (the adaptive mode's
        AR steps run the draft model's pass there)."""
        return None


class MemoryFairSD(StandardSD):
    """`sd-2m`: standard SD with PSD's 2m requests running (and their KV)."""

    @staticmethod
    def running_cap(s: Scenario) -> int:
        return 2 * s.m
