"""`psd`: MineDraft's batch-parallel SD: 2m requests in two sub-batches, a dedicated drafter GPU.

Two state machines, as in MineDraft (reference paper.md §4.2):
- the scheduler's Batch Manager (sim/batches.py) assigns each admitted request a flag;
- the worker (this module) verifies the sub-batch whose flag equals `send` while drafting the
  other one, keeps the other's proposals for the next step, and flips `send`. When one sub-batch
  is empty, everything is verified and nothing is drafted ahead; `send` resets to True and the
  next step must draft before it verifies (not parallelised): the sequential fallback, or tail.

A decode step's critical path is therefore
    [draft(S), when S has no proposals yet: init or fallback]
    + max(draft(D), inputs over the link + verify(S) + sampler output back)
    + rejection sampling on the drafter + fixed overhead.
A request verified without proposals (possible when the scheduler's and worker's flags drift
apart after a fallback) is scored with zero drafts and emits one token.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np

from sim.batches import BatchManager
from sim.devices import VerifyJob
from sim.messages import sampler_output_bytes, step_inputs_bytes
from sim.methods.common import SimContext, prefill_step, verify_outcome
from sim.records import DECODE, StepRecord
from sim.scenario import Scenario


class ParallelSD:
    uses_drafter = True

    @staticmethod
    def running_cap(s: Scenario) -> int:
        return 2 * s.m

    @staticmethod
    def gpus(s: Scenario) -> int:
        return s.tensor_parallel_size + 1

    def __init__(self, ctx: SimContext) -> None:
        self.ctx = ctx
        n = len(ctx.table)
        self.batches = BatchManager()
        self.flag = np.zeros(n, dtype=bool)      # sub-batch of each request
        # The running requests of each sub-batch, in admission order. The verified set is always
        # exactly one of them, so a step needs no masking of the running set.
        self.members = {False: np.empty(0, dtype=np.int64), True: np.empty(0, dtype=np.int64)}
        self.has_proposals = np.zeros(n, dtype=bool)
        self.send = True                         # worker: the sub-batch verified next
        self.have_previous = False               # worker: proposals drafted in the last step

    def admitted(self, ids: np.ndarray) -> None:
        if len(self.ctx.scheduler.running) == len(ids):  # nothing was running before
            self.batches.reset()
        flags = np.array([self.batches.assign() for _ in ids], dtype=bool)
        self.flag[ids] = flags
        for flag in (False, True):
            self.members[flag] = np.concatenate([self.members[flag], ids[flags == flag]])

    def retired(self, ids: np.ndarray) -> None:
        for r in ids:
            self.batches.recycle(bool(self.flag[r]))
        self.has_proposals[ids] = False
        remaining = self.ctx.table.remaining
        for flag, members in self.members.items():
            self.members[flag] = members[remaining[members] > 0]

    def prefill(self, ids: np.ndarray) -> Generator[Any, Any, None]:
        sizes = (len(self.members[False]), len(self.members[True]))
        yield from prefill_step(self.ctx, ids, with_draft=True, over_link=True,
                                  batch_sizes=sizes)

    def decode(self) -> Generator[Any, Any, None]:
        ctx = self.ctx
        env, cost, table, k = ctx.env, ctx.cost, ctx.table, ctx.scenario.k
        verify_ids, draft_ids = self.members[self.send], self.members[not self.send]
        b0, b1 = len(self.members[False]), len(self.members[True])
        if len(verify_ids) == 0:  # one sub-batch empty: verify all, draft nothing ahead
            verify_ids, draft_ids = draft_ids, verify_ids
        self.batches.decode_scheduled()

        start = env.now
        context = table.context(verify_ids)
        parallelised = self.have_previous
        draft_s = 0.0
        if not parallelised:  # init or fallback: draft the verified sub-batch first
            draft_s = cost.draft(len(verify_ids), k, context)
            yield env.timeout(draft_s)
            self.has_proposals[verify_ids] = True
            proposed = np.full(len(verify_ids), k, dtype=np.int64)
            total_proposed = k * len(verify_ids)
        else:
            has = self.has_proposals[verify_ids]
            proposed = has * k
            total_proposed = k * int(np.count_nonzero(has))
        tokens = total_proposed + len(verify_ids)
        job = VerifyJob(cost.verify(len(verify_ids), tokens, context),
                        step_inputs_bytes(len(verify_ids), tokens, context, ctx.scenario.block_size),
                        sampler_output_bytes(tokens, ctx.vocab))
        done = ctx.verifier.submit(job)
        ahead_s = 0.0
        if len(draft_ids):
            ahead_s = cost.draft(len(draft_ids), k, table.context(draft_ids))
            yield env.timeout(ahead_s)
            self.has_proposals[draft_ids] = True
        drafted_at = env.now
        yield done
        wait_s = env.now - drafted_at
        reject_s = cost.reject(tokens)
        yield env.timeout(reject_s + cost.overhead)

        self.has_proposals[verify_ids] = False
        out = verify_outcome(ctx, verify_ids, proposed, total_proposed)
        if len(draft_ids):
            self.have_previous, self.send = True, not self.send
        else:
            self.have_previous, self.send = False, True
        ctx.drafter_busy_s += draft_s + ahead_s + reject_s
        verifier_path = job.transfer_s + job.compute_s
        link_critical = max(verifier_path, ahead_s) - max(job.compute_s, ahead_s)
        ctx.steps.append(StepRecord(
            DECODE, start, env.now, parallelised, b0 + b1, b0, b1, len(verify_ids),
            len(draft_ids), tokens, out.proposed, out.accepted, out.generated,
            draft_s + ahead_s, job.compute_s, job.transfer_s, wait_s, link_critical))
