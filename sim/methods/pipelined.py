"""`psd`, `psd+tetris`: batch-parallel SD, N sub-batches pipelined over D drafter GPUs.

N x m requests run in N sub-batches. Each step verifies one of them while the drafter drafts
others, so drafting hides behind verification. Three choices plug in:

- the sub-batching policy (sim/methods/sub_batching.py): which sub-batch each request joins and which one a
  step verifies (MineDraft's Batch Manager, or the ring's round robin);
- the pipeline (sim/methods/pipelines.py): who drafts the sub-batches, and so which time engine
  runs the step. MineDraft's (N = 2, D = 1, docs/reference/paper.md §4.2): the driver drafts the
  other sub-batch beside each pass, within the step, so a step costs
      [draft(S), when S has no proposals yet: init or fallback]
      + max(draft(D), inputs over the link + target pass (verify S, prefill chunks) + output back)
      + the draft model's pass over the step's prompt tokens (to fill its KV) + rejection sampling
      + fixed overhead (+ KV swap time).
  The ring's (any N and D, beyond the paper, docs/design.md §2): D drafter workers draft the
  other sub-batches in the background; in steady state a step costs max(V, drafting / D,
  drafting / (N - 1)): N = 3 and D = 2 hide drafting up to twice the verification time, where
  MineDraft's N = 2, D = 1 hide it up to once;
- the draft-length policy (sim/methods/draft_length.py): k, adaptive k (MineDraft's pipeline
  only), or TETRIS (k + e drafted, the best k x m scored).

`PipelinedSD.step` is the step either pipeline runs, in the order of its critical path: pick the
sub-batches, have the verified one's drafts, score them, price the target pass, draft beside it,
run it, emit the outcome, record. Drafting that overlaps a target pass slows it and is slowed by
it where a profile measured contention, and drafter work after idling is slowed where it
measured that (sim/overlap.py), whichever pipeline runs. A request verified without proposals
(refills that joined a sub-batch after it was drafted) is scored with zero drafts and emits one
token: a wasted step. Every drafter GPU holds the draft KV of every request (sim/memory.py).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np

from psdsim.sim.costs import NO_CHUNKS
from psdsim.sim.devices import Drafter
from psdsim.sim.methods.common import (
    EngineMethod,
    SimContext,
    draft_counts,
    emit_outcome,
    record,
    verify_outcome,
)
from psdsim.sim.methods.draft_length import Selection, draft_length_policy
from psdsim.sim.methods.passes import Drafting, TargetPass, chunk_work, drafting_of
from psdsim.sim.methods.pipelines import pipeline_class
from psdsim.sim.methods.sub_batching import EMPTY, BatchManagerSubBatching, RoundRobinSubBatching
from psdsim.sim.methods.tail import PreDraftTail
from psdsim.sim.numbers import isum
from psdsim.sim.records import StepRecord
from psdsim.sim.scenario import Scenario
from psdsim.sim.scheduler import StepPlan


class PipelinedSD(EngineMethod):

    @staticmethod
    def running_cap(s: Scenario) -> int:
        return s.sub_batches * s.m

    @staticmethod
    def needs_events(s: Scenario) -> bool:
        return pipeline_class(s).events

    def __init__(self, sim: SimContext) -> None:
        super().__init__(sim)
        s, n = sim.scenario, sim.table.capacity
        self.draft_length = draft_length_policy(sim)
        self.lookahead = self.draft_length.width
        self.sub_batching = (BatchManagerSubBatching(n, s, self.lookahead, sim.scheduler) if s.batch_managed
                             else RoundRobinSubBatching(n, s.sub_batches))
        self.proposals = np.zeros(n, dtype=np.int64)   # drafts each request holds (0: none)
        sim.table.track(self, "proposals")
        sim.table.track(self.sub_batching, "flag")
        if isinstance(self.sub_batching, BatchManagerSubBatching):
            sim.table.track(self.sub_batching, "drafted_for")
            sim.table.track(self.sub_batching, "decoded")
        # Each sub-batch's context (KV tokens) as a running total, with the count of member changes
        # it was summed at (SubBatching.changes): a decoding request's context grows only when it is
        # verified (by the tokens its sub-batch kept, added once the pass is back), so the total
        # holds until the members change: two sums saved per step.
        self.contexts: dict[int, tuple[int, int]] = {}
        assert sim.drafter is not None
        self.drafter: Drafter = sim.drafter
        self.pipeline = pipeline_class(s)(self, s)
        # steps verifying a sub-batch that lost requests since it was drafted, and the first one's
        # start: where MineDraft's worker raises (sub_batching.BatchManagerSubBatching)
        self.lost_drafted_steps, self.first_lost_s = 0, 0.0
        self.skip_set_stop_s: float | None = None   # where MineDraft's swap assertion stops it
        self.tail = PreDraftTail(self, s.tail == "pre-draft") if s.tail != "sd" else None   # None: SD

    # -- scheduler hooks --------------------------------------------------------------------

    def allocating(self, decode: np.ndarray) -> np.ndarray | None:
        appending = self.sub_batching.allocating(decode)
        if self.tail is not None:   # the step being planned: its KV lookahead
            self.lookahead = self.tail.lookahead()
            if self.lookahead > self.tail.width and self.sub_batching.checks_skipped:
                # a tail step that pre-drafts needs its pre-drafts' slots: MineDraft's skipped
                # appends (which its SD tail can afford) do not apply to psdsim's pre-drafting tail
                return None
        return appending

    @property
    def checks_skipped(self) -> bool:
        return self.sub_batching.checks_skipped

    def target_tokens(self, slots: np.ndarray) -> np.ndarray:
        tokens = self.sub_batching.target_tokens(slots)
        return super().target_tokens(slots) if tokens is None else tokens

    def computes_chunks(self, prefill: np.ndarray, decode: np.ndarray) -> np.ndarray | None:
        return self.sub_batching.computes_chunks(prefill, decode)

    def admitted(self, slots: np.ndarray, mixed: bool) -> None:
        self.sub_batching.admitted(slots, mixed, restart=len(self.sim.scheduler.running) == len(slots))
        self.proposals[slots] = 0

    def graduated(self, slots: np.ndarray) -> None:
        self.sub_batching.graduated(slots)

    def resumed(self, slots: np.ndarray) -> None:
        self.sub_batching.resumed(slots)
        self.proposals[slots] = 0

    def left(self, slots: np.ndarray) -> None:
        self.sub_batching.left(slots, self.sim.table.state)
        self.proposals[slots] = 0

    def planning(self) -> None:
        if (self.skip_set_stop_s is None and isinstance(self.sub_batching, BatchManagerSubBatching)
                and self.sub_batching.skip_set_left_behind()):
            self.skip_set_stop_s = self.sim.env.now

    def run_warnings(self) -> list[str]:
        out = []
        if self.skip_set_stop_s is not None:
            out.append(f"MineDraft's code stops this run at t = {self.skip_set_stop_s:,.1f} s: the running "
                       "set emptied with a request swapped out after it decoded, and "
                       "Scheduler._schedule asserts _has_deferred_skip empty; psdsim swaps it back in "
                       "and goes on")
        if self.lost_drafted_steps:
            at, steps = self.first_lost_s, self.lost_drafted_steps
            out.append(f"MineDraft's code stops this run at t = {at:,.1f} s: {steps:,} "
                "decode step(s) verify a sub-batch that lost requests (preempted or aborted) after it was "
                "drafted, and ParallelSpecDecodeWorker._prepare_previous_proposals raises on the shorter "
                "batch; psdsim goes on as its _track_preempted_requests meant (the others keep their drafts)")
        return out

    # -- a step -----------------------------------------------------------------------------

    def step(self, plan: StepPlan) -> Generator[Any, Any, None]:
        """One step, in the order of its critical path; the pipeline decides who drafts and
        how time passes (sim/methods/pipelines.py)."""
        sim, sub_batching, pipeline = self.sim, self.sub_batching, self.pipeline
        rec, start = StepRecord(), sim.env.now
        v, ahead = sub_batching.turn(plan, rec)   # the sub-batch verified, the one drafted beside the pass
        if sub_batching.lost_drafted:
            self.lost_drafted_steps += 1
            if self.lost_drafted_steps == 1:
                self.first_lost_s = start
        slots = sub_batching.members[v] if v is not None else EMPTY
        batch = len(slots)
        context = self._context(v) if v is not None else 0
        chunks = chunk_work(sim, plan)
        pipeline.started(v, rec)            # the ring: the other sub-batches queued for drafting
        t = start
        if v is not None:   # drafted earlier (parallelised), being drafted, or drafted first now
            t, drafting = pipeline.drafts_of(v, slots, context, chunks, rec, t)
            if drafting is not None:   # the ring: a drafter is still at it
                yield drafting
                t = sim.env.now
        proposed, selection, shift = self._scored(plan, v, slots, rec.parallelised)
        total = isum(proposed)
        tokens = total + batch
        target = TargetPass(sim, batch, tokens, context, chunks)
        beside = self._ahead(ahead, rec)    # MineDraft: the other sub-batch, drafted during the pass
        tail = self.tail
        if v is None:
            target.label("prefill")
        else:
            target.label("verify", v, int(proposed.max()) if sim.timeline else 0)
            if ahead is None and tail is not None:   # the tail: its own next drafts, PEARL style
                beside, ahead = tail.pre_draft(v, slots, context, total, rec), v
        yield from pipeline.verify(plan, rec, target, t, v, beside)
        self._verified(v, ahead, slots, proposed, total, selection, shift, rec)
        if v is not None:   # rec.generated is the verified requests' kept tokens until record()
            self._grew(v, rec.generated)
            if tail is not None:
                tail.verified(rec)
        rec.verified, rec.scored = batch, tokens if v is not None else 0
        record(sim, plan, start, rec)

    def _scored(self, plan: StepPlan, v: int | None, slots: np.ndarray,
                parallelised: bool) -> tuple[np.ndarray, Selection | None, int]:
        """Drafts each verified request has scored (TETRIS's choice, the vllm-v1 cap), TETRIS's
        selection, and how many requests on the verified drafts are shifted (`misaligned`)."""
        proposed = self.proposals[slots]
        selection = self.draft_length.select(slots, proposed) if len(slots) else None
        if selection is not None:
            proposed = draft_counts(plan, slots, selection.lengths)  # TETRIS accepts among those scored
            selection = Selection(proposed, selection.accepted)
        elif plan.spec_cap is not None:
            proposed = draft_counts(plan, slots, proposed)
        shift = self.sub_batching.misaligned(slots, parallelised) if v is not None else 0
        if shift:  # swapped-in requests at the end push every proposal `shift` requests on
            return np.concatenate([np.zeros(shift, dtype=np.int64), proposed[:-shift]]), None, shift
        return proposed, selection, 0

    def _verified(self, v: int | None, ahead: int | None, slots: np.ndarray, proposed: np.ndarray, total: int,
                  selection: Selection | None, shift: int, rec: StepRecord) -> None:
        """The pass is back: the verified requests' drafts are used up, their tokens emitted."""
        self.proposals[slots] = 0
        if shift:  # drafts scored against another request's sequence: rejected
            emit_outcome(self.sim, rec, slots, proposed, total, np.zeros(len(slots), dtype=np.int64))
        elif selection is None:
            verify_outcome(self.sim, rec, slots, proposed, total)
            self.draft_length.seen(proposed, total)
        else:
            emit_outcome(self.sim, rec, slots, proposed, total, selection.leading())
        if v is not None:
            self.sub_batching.verified(v, ahead)

    # -- drafting ---------------------------------------------------------------------------

    def _context(self, b: int) -> int:
        """The context of sub-batch `b`: the running total while its members are those it was
        summed for, else summed afresh."""
        changes = self.sub_batching.changes[b]
        known = self.contexts.get(b)
        if known is not None and known[0] == changes:
            return known[1]
        context = self.sim.table.context(self.sub_batching.members[b])
        self.contexts[b] = (changes, context)
        return context

    def _grew(self, b: int, kept: int) -> None:
        """Sub-batch `b` was verified and kept `kept` tokens: its running total grows by them."""
        changes, context = self.contexts[b]
        self.contexts[b] = (changes, context + kept)

    def _ahead(self, ahead: int | None, rec: StepRecord) -> Drafting | None:
        """The drafting of sub-batch `ahead` beside the pass (its seconds alone; None: none);
        its requests hold its k drafts once it is done."""
        if ahead is None:
            return None
        slots = self.sub_batching.members[ahead]
        context = self._context(ahead)
        k = self.draft_length.k(slots, context, NO_CHUNKS, parallel=True)
        self.proposals[slots] = k   # held from when the drafting beside the pass ends
        rec.drafted = len(slots)
        return drafting_of(self.sim, rec, slots, k, context, "draft", ahead)
