"""What every method shares: the run's context, the prefill step and verification outcomes."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
import simpy

from sim.acceptance import AcceptanceSampler
from sim.costs import StepCost
from sim.devices import Link, Verifier, VerifyJob
from sim.messages import sampler_output_bytes, step_inputs_bytes
from sim.records import PREFILL, StepRecord
from sim.requests import RequestTable
from sim.scenario import Scenario
from sim.scheduler import Scheduler


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
    steps: list[StepRecord] = field(default_factory=list)
    drafter_busy_s: float = 0.0


class Outcome(NamedTuple):
    """Totals of one verification over a batch."""

    proposed: int
    accepted: int
    generated: int


def verify_outcome(ctx: SimContext, ids: np.ndarray, proposed: np.ndarray,
                   total_proposed: int) -> Outcome:
    """Draw acceptance for verified requests, emit accepted + 1 tokens each, update stats.
    `total_proposed` is proposed.sum(), which every caller already knows."""
    t = ctx.table
    if total_proposed:
        accepted = ctx.acceptance.accepted(t.log_acceptance[ids], proposed)
        total_accepted = int(accepted.sum())
    else:
        accepted = np.zeros(len(ids), dtype=np.int64)
        total_accepted = 0
    kept = t.emit(ids, accepted + 1)
    t.log_verification(ids, proposed, accepted)
    return Outcome(total_proposed, total_accepted, int(kept.sum()))


def prefill_step(ctx: SimContext, ids: np.ndarray, *, with_draft: bool, over_link: bool,
                 batch_sizes: tuple[int, int]) -> Generator[Any, Any, None]:
    """A prefill-only step: the target prefills on the verifier group (inputs in and sampler
    output back over the link when the driver sits on a separate GPU), then the draft model
    prefills; MineDraft runs the two one after the other (`_run_no_spec`). The target samples
    each request's first token."""
    env, cost, t = ctx.env, ctx.cost, ctx.table
    start = env.now
    prompts = t.prompt_len[ids]
    tokens, squares = int(prompts.sum()), int((prompts * prompts).sum())
    job = VerifyJob(cost.prefill_target(len(ids), tokens, squares))
    if over_link:
        job.send_bytes = step_inputs_bytes(len(ids), tokens, tokens, ctx.scenario.block_size)
        job.return_bytes = sampler_output_bytes(len(ids), ctx.vocab)
    yield ctx.verifier.submit(job)
    draft_s = cost.prefill_draft(len(ids), tokens, squares) if with_draft else 0.0
    yield env.timeout(draft_s + cost.overhead)
    ctx.drafter_busy_s += draft_s
    kept = t.emit(ids, np.ones(len(ids), dtype=np.int64))
    t.first_token_s[ids] = env.now
    ctx.steps.append(StepRecord(
        PREFILL, start, env.now, False, len(ctx.scheduler.running), *batch_sizes, len(ids), 0,
        tokens, 0, 0, int(kept.sum()), draft_s, job.compute_s, job.transfer_s, 0.0,
        job.transfer_s))
