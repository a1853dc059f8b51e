"""`psd`: MineDraft's batch-parallel SD: 2m requests in two sub-batches, a dedicated drafter GPU.

Two state machines, as in MineDraft (docs/reference/paper.md §4.2):
- the scheduler's Batch Manager (sim/batches.py) assigns each admitted request a flag;
- the worker (this module) verifies the decoding sub-batch whose flag equals `send` while
  drafting the other one, keeps the other's proposals for the next step, and flips `send`. When
  one sub-batch is empty, everything is verified and nothing is drafted ahead; `send` resets to
  True and the next step must draft before it verifies (not parallelised): the sequential
  fallback, or tail.

A decode step's critical path is therefore
    [draft(S), when S has no proposals yet: init or fallback]
    + max(draft(D), inputs over the link + target pass (verify S, prefill chunks) + output back)
    + the draft model's pass over the step's prompt tokens (to fill its KV) + rejection sampling
    + fixed overhead (+ KV swap time).
A request verified without proposals (after the scheduler's and worker's flags drift apart, or
with the `rebalance` option) is scored with zero drafts and emits one token: a wasted step.

KV (scenario `kv_patch`): `has_deferred` (MineDraft's patch) grows a request's KV only when its
sub-batch is verified, or at its first decode; `default` (vLLM) grows every running request's
KV to context + k at every step. With chunked prefill, prompt chunks ride in whichever target
pass the step makes, so prompts graduate whenever their last chunk is done, out of phase with
the two-step alternation; flags go by balance (MineDraft's mixed-batch branch). A prompt that
graduates into the sub-batch verified next has no drafts yet, and its first verification is a
wasted step. (MineDraft supports chunked prefill only partially; this is a model of its intent,
not of its corner cases.)
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np
from psdsim.sim.batches import BatchManager
from psdsim.sim.costs import NO_CHUNKS, Chunks
from psdsim.sim.devices import VerifyJob
from psdsim.sim.methods.adaptive import AcceptanceEstimate, best_k
from psdsim.sim.methods.common import (
    EngineMethod,
    SimContext,
    after_verify,
    chunk_work,
    draft_counts,
    emit_first_tokens,
    emit_outcome,
    link_bytes,
    link_seconds,
    record,
    verify_outcome,
)
from psdsim.sim.overlap import overlapped
from psdsim.sim.requests import DECODING
from psdsim.sim.scenario import Scenario
from psdsim.sim.scheduler import StepPlan
from psdsim.sim.tetris import draft_positions, leading_accepted, select_prefixes
from psdsim.sim.timeline import DRAFTER, ON_DRAFTER

EMPTY = np.empty(0, dtype=np.int64)


class ParallelSD(EngineMethod):
    uses_drafter = True

    @staticmethod
    def running_cap(s: Scenario) -> int:
        return 2 * s.m

    def __init__(self, ctx: SimContext) -> None:
        super().__init__(ctx)
        n = len(ctx.table)
        s = ctx.scenario
        self.batches = BatchManager()
        self.flag = np.zeros(n, dtype=bool)      # sub-batch of each request
        # The decoding requests of each sub-batch, in admission order. The verified set is always
        # exactly one of them, so a step needs no masking of the running set.
        self.members = {False: EMPTY.copy(), True: EMPTY.copy()}
        self.proposals = np.zeros(n, dtype=np.int64)  # drafts each request holds (0: none)
        self.fresh: list[int] = []  # decoding requests not yet scheduled for a decode step
        self.send = True                         # worker: the sub-batch verified next
        self.have_previous = False               # worker: proposals drafted in the last step
        self.after_wait = 1.0                    # driver: slowdown after its last wait (sim/overlap.py)
        self.deferred = s.kv_patch == "has_deferred"
        self.balanced_refills = s.rebalance
        # TETRIS drafts k + e per request and scores the best k x m when the batch is full.
        self.tetris = s.method == "psd+tetris"
        self.width = s.k + (s.extra if self.tetris else 0)
        self.lookahead = self.width
        # k_policy = adaptive: each drafting picks its k' in 0..k (sim/methods/adaptive.py)
        self.estimate = (AcceptanceEstimate(ctx.table.acceptance_mean)
                         if s.k_policy == "adaptive" else None)

    # -- the split of the coming step -------------------------------------------------------

    def _verified_flag(self) -> bool | None:
        """The flag of the sub-batch the coming decode step verifies (None: nothing decodes)."""
        if len(self.members[self.send]):
            return self.send
        if len(self.members[not self.send]):
            return not self.send  # one sub-batch empty: the other is verified whole
        return None

    # -- scheduler hooks --------------------------------------------------------------------

    def allocating(self, decode: np.ndarray) -> np.ndarray | None:
        if not self.deferred:
            return None
        verified = self._verified_flag()
        ids = self.members[verified] if verified is not None else EMPTY
        if self.fresh:  # a request's first decode step always allocates
            ids = np.union1d(ids, np.array(self.fresh, dtype=np.int64))
        return ids

    def target_tokens(self, ids: np.ndarray) -> np.ndarray:
        verified = self.flag[ids] == self._verified_flag()
        return np.where(verified, 1 + self.lookahead, 0)

    def admitted(self, ids: np.ndarray, mixed: bool) -> None:
        if len(self.ctx.scheduler.running) == len(ids):  # nothing was running before
            self.batches.reset()
        balanced = mixed or self.balanced_refills
        self.flag[ids] = [self.batches.assign(balanced) for _ in range(len(ids))]
        self.proposals[ids] = 0

    def graduated(self, ids: np.ndarray) -> None:
        flags = self.flag[ids]
        for flag in (False, True):
            self.members[flag] = np.concatenate([self.members[flag], ids[flags == flag]])
        self.fresh.extend(ids.tolist())

    def resumed(self, ids: np.ndarray) -> None:
        self.flag[ids] = [self.batches.assign(self.balanced_refills) for _ in range(len(ids))]
        self.proposals[ids] = 0
        self.graduated(ids)

    def left(self, ids: np.ndarray) -> None:
        flags = self.flag[ids]
        for flag in flags.tolist():
            self.batches.recycle(flag)
        self.proposals[ids] = 0
        state = self.ctx.table.state
        for flag in set(flags.tolist()):  # the request states already say who left
            members = self.members[flag]
            self.members[flag] = members[state[members] == DECODING]
        if self.fresh:
            gone = set(ids.tolist())
            self.fresh = [r for r in self.fresh if r not in gone]

    # -- a step -----------------------------------------------------------------------------

    def _select(self, ids: np.ndarray, drafted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """TETRIS: draft confidences and acceptances for the verified requests' k + e drafts,
        and how many of them to score (the best k x m prefixes when the batch is full)."""
        s = self.ctx.scenario
        log_q, accepted = draft_positions(self.ctx.table.acceptance[ids], self.width,
                                          s.confidence_spread, self.ctx.rng)
        log_q = np.where(np.arange(self.width)[None, :] < drafted[:, None], log_q, -np.inf)
        lengths = drafted
        if len(ids) >= s.m:
            lengths = np.minimum(select_prefixes(log_q, s.k * s.m), drafted)
        return lengths, accepted

    def _k(self, ids: np.ndarray, context: int, chunks: Chunks, parallel: bool) -> int:
        """Drafts per request for a drafting of `ids`: k (the width), or with k_policy =
        adaptive the k' in 0..k with the most expected tokens/s of a step that overlaps it with
        a target pass (parallel) or runs the two in turn (init and fallback steps)."""
        if self.estimate is None:
            return self.width
        ctx = self.ctx
        return best_k(ctx.cost, len(ids), context, chunks, self.width, self.estimate.rate, parallel,
                      link_seconds(ctx, len(ids), context, chunks))

    def step(self, plan: StepPlan) -> Generator[Any, Any, None]:
        ctx = self.ctx
        env, cost, table, tl = ctx.env, ctx.cost, ctx.table, ctx.timeline
        b0, b1 = len(self.members[False]), len(self.members[True])
        v = self.send  # the flag of the sub-batch verified in this step
        if len(plan.decode):
            if len(self.members[v]) == 0:  # one sub-batch empty: verify all, draft nothing ahead
                v = not v
            verify_ids, draft_ids = self.members[v], self.members[not v]
        else:  # a prefill-only step: the decoding requests wait
            verify_ids = draft_ids = EMPTY
        decoding = len(verify_ids) > 0
        if decoding:
            self.batches.decode_scheduled()
            self.fresh.clear()
        chunks = chunk_work(ctx, plan)

        start = env.now
        context = table.context(verify_ids)
        parallelised = decoding and self.have_previous
        draft_s = 0.0
        if decoding and not parallelised:  # init or fallback: draft the verified sub-batch first
            k_now = self._k(verify_ids, context, chunks, parallel=False)
            draft_s = cost.draft(len(verify_ids), k_now, context) * self.after_wait if k_now else 0.0
            yield env.timeout(draft_s)
            if tl is not None and k_now:
                tl.add(DRAFTER, f"draft B{v:d}", ON_DRAFTER, start, env.now, sub_batch=int(v),
                       batch=len(verify_ids), k=k_now)
            self.proposals[verify_ids] = k_now
        proposed = self.proposals[verify_ids]
        total_proposed = int(proposed.sum())
        tetris = None
        if self.tetris and len(verify_ids):
            tetris = self._select(verify_ids, proposed)
            proposed = tetris[0]
            total_proposed = int(proposed.sum())
        if plan.spec_cap is not None:
            proposed = draft_counts(plan, verify_ids, proposed)
            total_proposed = int(proposed.sum())
        tokens = total_proposed + len(verify_ids)
        job = VerifyJob(cost.verify(len(verify_ids), tokens, context, chunks),
                        *link_bytes(ctx, len(verify_ids), tokens, context, chunks))
        if tl is not None:
            job.name, job.args = ((f"verify B{v:d}", {"sub_batch": int(v), "k": int(proposed.max())})
                                  if decoding else ("prefill", None))
        ahead_context = table.context(draft_ids)
        k_ahead = self._k(draft_ids, ahead_context, NO_CHUNKS, parallel=True) if len(draft_ids) else 0
        ahead_s = cost.draft(len(draft_ids), k_ahead, ahead_context) * self.after_wait if k_ahead else 0.0
        if ahead_s and ctx.slow.overlap is not None:  # the two slow each other while both run
            ahead_s, job.compute_s = overlapped(ahead_s, job.compute_s, cost.broadcast(job.send_bytes),
                                                *ctx.slow.overlap)
        done = ctx.verifier.submit(job)
        if len(draft_ids):
            began = env.now
            yield env.timeout(ahead_s)
            if tl is not None and k_ahead:
                tl.add(DRAFTER, f"draft B{not v:d}", ON_DRAFTER, began, env.now,
                       sub_batch=int(not v), batch=len(draft_ids), k=k_ahead)
            self.proposals[draft_ids] = k_ahead
        drafted_at = env.now
        yield done
        wait_s = env.now - drafted_at
        sync_s, reject_s, swap_s, self.after_wait = yield from after_verify(
            ctx, plan, chunks, tokens, decoding, drafted_at, reject_on_drafter=True)

        self.proposals[verify_ids] = 0
        if tetris is None:
            out = verify_outcome(ctx, verify_ids, proposed, total_proposed)
            if self.estimate is not None and total_proposed:
                self.estimate.update(proposed, table.last_accepted)
        else:
            accepted = leading_accepted(tetris[1], proposed)
            out = emit_outcome(ctx, verify_ids, proposed, total_proposed, accepted)
        if decoding:
            if len(draft_ids):
                self.have_previous, self.send = True, not self.send
            else:
                self.have_previous, self.send = False, True
        ctx.drafter_busy_s += draft_s + ahead_s + sync_s + reject_s
        verifier_path = job.transfer_s + job.compute_s
        record(ctx, plan, start, parallelised=parallelised, batches=(b0, b1),
               verified=len(verify_ids), drafted=len(draft_ids), scored=tokens if decoding else 0,
               out=out, first_tokens=emit_first_tokens(ctx, plan), draft_s=draft_s + ahead_s + sync_s,
               verify_s=job.compute_s, comm_s=job.transfer_s,
               wait_s=wait_s if decoding else 0.0,
               link_critical_s=max(verifier_path, ahead_s) - max(job.compute_s, ahead_s)
               if decoding else job.transfer_s,
               swap_s=swap_s)
