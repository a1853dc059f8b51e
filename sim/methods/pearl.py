"""`pearl`: PEARL's post-verify pipelining, batched as MineDraft re-implements it (5 GPUs).

No sub-batches: every step verifies all m running requests while the drafter drafts the next k
tokens for each of them, assuming the drafts being verified will all be accepted (reference
paper.md §4.2 "PEARL baseline inside MineDraft", §10). After the step a request's pre-drafted
tokens are *valid* only if all its drafts were accepted (or, having had no drafts, the draft's
first token matches the target's: probability = its acceptance rate); otherwise they continue a
prefix that was rejected and are stale. As in MineDraft's worker, the pre-drafted tokens are used
for every request as long as at least one request's are valid: stale drafts are still scored,
and accept nothing (modelled as zero acceptance); when none is valid, the whole batch takes a
step without drafts. So the more requests share a step, the longer stale drafts linger before the
batch resets, and each rejection costs a request a wasted speculation step.
KV: each decode keeps 2k - 1 lookahead slots, as MineDraft's PEARL mode allocates.

`pearl_variant = "per-request"` is the lossless per-request form the reference engine runs
(engine/reference/methods.py): the first token drafted ahead sits at the position of the bonus
token, so it is checked there (accepted with the request's acceptance rate) after the request's
proposals; when it and every proposal pass, the other k - 1 drafted ahead are the request's next
proposals, otherwise it has none next step. Nothing stale is ever scored, and at k = 1 nothing
is ever proposed. MineDraft's form keeps k pre-drafted tokens without checking that position.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
from psdsim.sim.devices import VerifyJob
from psdsim.sim.methods.common import (
    EngineMethod,
    SimContext,
    after_verify,
    chunk_work,
    draft_counts,
    emit_first_tokens,
    link_bytes,
    record,
    verify_outcome,
)
from psdsim.sim.overlap import overlapped
from psdsim.sim.scheduler import StepPlan
from psdsim.sim.timeline import DRAFTER, ON_DRAFTER


class PEARL(EngineMethod):
    uses_drafter = True

    def __init__(self, ctx: SimContext) -> None:
        super().__init__(ctx)
        n = len(ctx.table)
        self.lookahead = 2 * ctx.scenario.k - 1
        self.per_request = ctx.scenario.pearl_variant == "per-request"
        self.drafted = np.zeros(n, dtype=bool)  # pre-drafted tokens exist (valid or stale)
        self.valid = np.zeros(n, dtype=bool)    # ... and continue the request's real prefix
        self.after_wait = 1.0                   # driver: slowdown after its last wait (sim/overlap.py)

    def left(self, ids: np.ndarray) -> None:
        self.drafted[ids] = False
        self.valid[ids] = False

    def step(self, plan: StepPlan) -> Generator[Any, Any, None]:
        ctx = self.ctx
        env, cost, table, k, tl = ctx.env, ctx.cost, ctx.table, ctx.scenario.k, ctx.timeline
        ids = plan.decode
        batch = len(ids)
        chunks = chunk_work(ctx, plan)
        context = table.context(ids)
        start = env.now
        if self.per_request:
            use_drafts = batch > 0
            proposed = self.valid[ids] * (k - 1)
        else:
            use_drafts = batch > 0 and bool(self.valid[ids].any())
            proposed = (self.drafted[ids] * k if use_drafts else np.zeros(batch, dtype=np.int64))
        proposed = draft_counts(plan, ids, proposed)
        total_proposed = int(proposed.sum())
        tokens = total_proposed + batch
        job = VerifyJob(cost.verify(batch, tokens, context, chunks),
                        *link_bytes(ctx, batch, tokens, context, chunks))
        if tl is not None:
            job.name, job.args = (("verify", {"k": k, "drafts_used": use_drafts}) if batch
                                  else ("prefill", None))
        # post-verify: draft the next k for everyone while the target verifies
        ahead_s = cost.draft(batch, k, context + batch * k) * self.after_wait if batch else 0.0
        if ahead_s and ctx.slow.overlap is not None:  # the two slow each other while both run
            ahead_s, job.compute_s = overlapped(ahead_s, job.compute_s, cost.broadcast(job.send_bytes),
                                                *ctx.slow.overlap)
        done = ctx.verifier.submit(job)
        if batch:
            yield env.timeout(ahead_s)
            if tl is not None:
                tl.add(DRAFTER, "draft ahead", ON_DRAFTER, start, env.now, batch=batch, k=k)
        drafted_at = env.now
        yield done
        wait_s = env.now - drafted_at
        sync_s, reject_s, swap_s, self.after_wait = yield from after_verify(
            ctx, plan, chunks, tokens, bool(batch), drafted_at, reject_on_drafter=True)

        # Stale drafts continue a rejected prefix: they are scored and accept nothing.
        valid = self.valid[ids]
        out = verify_outcome(ctx, ids, proposed, total_proposed,
                             acceptable=None if self.per_request else valid)
        if batch:
            first_match = ctx.acceptance.bernoulli(table.log_acceptance[ids])
            if self.per_request:  # every proposal passed, then the first token drafted ahead
                self.valid[ids] = (table.last_accepted == proposed) & first_match
            else:
                all_accepted = valid & (table.last_accepted == proposed)
                self.valid[ids] = np.where(proposed > 0, all_accepted, first_match)
                self.drafted[ids] = True
        ctx.drafter_busy_s += ahead_s + sync_s + reject_s
        verifier_path = job.transfer_s + job.compute_s
        record(ctx, plan, start, parallelised=batch > 0, verified=batch, drafted=batch,
               scored=tokens if batch else 0,
               out=out, first_tokens=emit_first_tokens(ctx, plan),
               draft_s=ahead_s + sync_s, verify_s=job.compute_s, comm_s=job.transfer_s,
               wait_s=wait_s if batch else 0.0,
               link_critical_s=(max(verifier_path, ahead_s) - max(job.compute_s, ahead_s)
                                if batch else job.transfer_s),
               swap_s=swap_s)
