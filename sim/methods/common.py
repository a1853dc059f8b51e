"""What every method shares: the run's context, prefill work in a pass, verification outcomes,
and the step record."""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import simpy
from psdsim.sim.acceptance import AcceptanceSampler
from psdsim.sim.costs import NO_CHUNKS, Chunks, StepCost
from psdsim.sim.devices import TO_DRAFTER, TO_VERIFIER, Link, Verifier
from psdsim.sim.layout import layout_for
from psdsim.sim.messages import hidden_state_bytes, sampler_output_bytes, step_inputs_bytes
from psdsim.sim.overlap import NO_SLOWDOWNS, Slowdowns
from psdsim.sim.records import DECODE, PREFILL, StepRecord
from psdsim.sim.requests import PREFILLING, RequestTable
from psdsim.sim.scenario import Scenario
from psdsim.sim.scheduler import EngineHooks, Scheduler, StepPlan
from psdsim.sim.timeline import (
    DRAFT_PREFILL,
    DRAFTER,
    DRIVER,
    ON_DRAFTER,
    ON_DRIVER,
    REJECT,
    Timeline,
    driver_parts,
)


@dataclass
class SimContext:
    env: simpy.Environment
    scenario: Scenario
    cost: StepCost
    rng: np.random.Generator
    table: RequestTable
    scheduler: Scheduler
    verifier: Verifier
    link: Link
    vocab: int
    acceptance: AcceptanceSampler
    hidden: int = 0              # the target's hidden size when the draft is an EAGLE head
    steps: list[StepRecord] = field(default_factory=list)
    drafter_busy_s: float = 0.0
    timeline: Timeline | None = None  # records the run's work when asked (sim/timeline.py)
    slow: Slowdowns = NO_SLOWDOWNS    # a profile's measured slowdowns this run pays (sim/overlap.py)
    overlap_prefill: bool = False     # the drafter prefills beside the target (overlap_draft_prefill)


class Outcome(NamedTuple):
    """Totals of one verification over a batch."""

    proposed: int
    accepted: int
    generated: int
    unproposed: int


NO_OUTCOME = Outcome(0, 0, 0, 0)


class EngineMethod(EngineHooks):
    """Base of the methods: holds the context and the scheduler hooks' defaults."""

    uses_drafter = False

    def __init__(self, ctx: SimContext) -> None:
        self.ctx = ctx
        self.lookahead = ctx.scenario.k if self.uses_drafter else 0

    @staticmethod
    def running_cap(s: Scenario) -> int:
        """Cap on the running set (max_num_seqs): m, or 2m for PSD."""
        return s.m

    @staticmethod
    def gpus(s: Scenario) -> int:
        return layout_for(s).gpus

    def step(self, plan: StepPlan) -> Generator[Any, Any, None]:
        """Execute one planned engine step in simulated time (each method its own)."""
        raise NotImplementedError


def chunk_work(ctx: SimContext, plan: StepPlan) -> Chunks:
    """The prefill work of a plan: each chunk attends to its prompt's earlier chunks and itself."""
    if not len(plan.prefill):
        return NO_CHUNKS
    computed = ctx.table.computed[plan.prefill]
    chunk = plan.chunk
    pairs = float((chunk * computed).sum() + (chunk * chunk).sum() / 2)
    return Chunks(int(chunk.sum()), pairs, int(computed.sum()), int(plan.completes.sum()))


def link_bytes(ctx: SimContext, requests: int, scored: int, context: int,
               chunks: Chunks) -> tuple[int, int]:
    """(inputs broadcast to the verifier group, sampler output back) for one target pass."""
    s = ctx.scenario
    send = step_inputs_bytes(requests, scored + chunks.tokens, context + chunks.ctx, s.block_size)
    back = sampler_output_bytes(scored + chunks.completing, ctx.vocab, s.sampler_output == "compact")
    if ctx.hidden:
        back += hidden_state_bytes(scored + chunks.tokens, ctx.hidden)
    return send, back


def link_seconds(ctx: SimContext, requests: int, context: int, chunks: Chunks) -> Callable[[int], float]:
    """Seconds the step's messages hold the link, both ways, as a function of the positions
    the target pass scores (adaptive k prices each choice with it)."""
    def seconds(scored: int) -> float:
        send, back = link_bytes(ctx, requests, scored, context, chunks)
        return ctx.link.seconds(TO_VERIFIER, send) + ctx.link.seconds(TO_DRAFTER, back)

    return seconds


class AfterVerify(NamedTuple):
    """What the driver's work after a target pass cost: the draft model's prompt pass (all of
    it, including any part that overlapped the target pass), rejection sampling, swaps, and the
    slowdown of the driver's work until it next waits (sim/overlap.py)."""

    sync_s: float
    reject_s: float
    swap_s: float
    after_wait: float


def after_verify(ctx: SimContext, plan: StepPlan, chunks: Chunks, tokens: int, scored: bool,
                 waited_from: float, reject_on_drafter: bool) -> Generator[Any, Any, AfterVerify]:
    """The driver's work once the target pass is back (it waited from `waited_from`): what is
    left of the draft model's prompt pass, rejection sampling of the `tokens` scored positions
    (if `scored`), the step overhead and swaps, slowed by that wait where a profile measured it;
    drawn on the timeline, rejection sampling on the drafter's GPU (MineDraft's driver runs
    there) or on the driver's."""
    env, cost, tl = ctx.env, ctx.cost, ctx.timeline
    sync_s = cost.draft_chunks(chunks)
    idle = ctx.slow.driver_idle
    after_wait = idle(env.now - waited_from) if idle is not None else 1.0
    # with overlap_prefill the draft's prompt pass ran beside the target's: only the rest is left
    left = max(0.0, waited_from + sync_s - env.now) if ctx.overlap_prefill and sync_s else sync_s
    left_s = left * after_wait   # what is left runs after the wait, slowed by it
    reject_s = cost.reject(tokens) * after_wait if scored else 0.0
    swap_s = cost.swap(plan.swap_blocks)
    verified_at = env.now
    yield env.timeout(left_s + reject_s + cost.overhead + swap_s)
    if tl is not None:
        if left < sync_s:  # the overlapped part ran beside the target pass
            tl.add(DRAFTER, DRAFT_PREFILL, ON_DRAFTER, waited_from, waited_from + sync_s - left)
        reject = (DRAFTER, REJECT, ON_DRAFTER) if reject_on_drafter else (DRIVER, REJECT, ON_DRIVER)
        tl.after(verified_at, env.now, [(DRAFTER, DRAFT_PREFILL, ON_DRAFTER, left_s), (*reject, reject_s),
                                        *driver_parts(cost.overhead, swap_s)])
    return AfterVerify(sync_s, reject_s, swap_s, after_wait)


def emit_first_tokens(ctx: SimContext, plan: StepPlan) -> int:
    """Prompts whose prefill completed sample a token (the first, or the next after a recompute)."""
    if not len(plan.prefill):
        return 0
    done = plan.prefill[plan.completes]
    if not len(done):
        return 0
    t = ctx.table
    kept = t.emit(done, np.ones(len(done), dtype=np.int64))
    t.first_token(done, ctx.env.now)
    return len(done) if kept is None else int(kept.sum())


def draft_counts(plan: StepPlan, ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Draft tokens each verified request gets scored: what was drafted, capped by the vllm-v1
    budget when the plan truncates drafts."""
    if plan.spec_cap is None:
        return wanted
    cap = dict(zip(plan.decode.tolist(), plan.spec_cap.tolist(), strict=True))
    return np.minimum(wanted, np.array([cap[r] for r in ids.tolist()], dtype=np.int64))


def verify_outcome(ctx: SimContext, ids: np.ndarray, proposed: np.ndarray,
                   total_proposed: int, acceptable: np.ndarray | None = None) -> Outcome:
    """Draw acceptance for verified requests, emit accepted + 1 tokens each, update stats.
    `total_proposed` is proposed.sum(), which every caller already knows; where `acceptable` is
    False a request's drafts are scored but cannot be accepted (PEARL's stale drafts)."""
    if not len(ids):
        return NO_OUTCOME
    if total_proposed:
        accepted = ctx.acceptance.accepted(ctx.table.log_acceptance[ids], proposed)
        if acceptable is not None:
            accepted *= acceptable
    else:
        accepted = np.zeros(len(ids), dtype=np.int64)
    return emit_outcome(ctx, ids, proposed, total_proposed, accepted)


def emit_outcome(ctx: SimContext, ids: np.ndarray, proposed: np.ndarray, total_proposed: int,
                 accepted: np.ndarray) -> Outcome:
    """Emit accepted + 1 tokens for each verified request and log the verification."""
    t = ctx.table
    total_accepted = int(accepted.sum()) if total_proposed else 0
    if total_proposed:
        unproposed = len(ids) - int(np.count_nonzero(proposed))
    else:
        unproposed = len(ids) if ctx.scenario.method != "ar" else 0
    kept = t.emit(ids, accepted + 1)
    t.log_verification(ids, proposed, accepted)
    generated = total_accepted + len(ids) if kept is None else int(kept.sum())
    return Outcome(total_proposed, total_accepted, generated, unproposed)


def record(ctx: SimContext, plan: StepPlan, start: float, *, parallelised: bool = False,
           batches: tuple[int, int] | None = None, verified: int = 0, drafted: int = 0, scored: int = 0,
           out: Outcome = NO_OUTCOME, first_tokens: int = 0, draft_s: float = 0.0,
           verify_s: float = 0.0, comm_s: float = 0.0, wait_s: float = 0.0,
           link_critical_s: float = 0.0, swap_s: float = 0.0) -> None:
    """Append the step's record. `batches` are PSD's decoding sub-batch sizes; for the other
    methods every decoding request of the running set counts in batch0."""
    t = ctx.table
    running = ctx.scheduler.running
    prefilling = int(np.count_nonzero(t.state[running] == PREFILLING)) if len(plan.prefill) or \
        ctx.scheduler.chunked else 0
    if batches is None:
        batches = (len(running) - prefilling, 0)
    ctx.steps.append(StepRecord(
        DECODE if verified else PREFILL, start, ctx.env.now, parallelised, len(running),
        batches[0], batches[1], prefilling, verified, drafted, scored,
        int(plan.chunk.sum()) if len(plan.prefill) else 0,
        int(plan.completes.sum()) if len(plan.prefill) else 0,
        out.proposed, out.accepted, out.generated + first_tokens, out.unproposed, draft_s,
        verify_s, comm_s, wait_s, link_critical_s, swap_s, plan.preempted, plan.kv_blocks,
        plan.waiting))
