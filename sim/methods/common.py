"""What every method shares: the run's context, the base class, verification outcomes, and the
step record."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from psdsim.sim.acceptance import AcceptanceSampler
from psdsim.sim.clock import Time
from psdsim.sim.costs import StepCost
from psdsim.sim.devices import Drafter, Link, Verifier
from psdsim.sim.layout import Layout, layout_for
from psdsim.sim.numbers import isum
from psdsim.sim.overlap import NO_SLOWDOWNS, Slowdowns
from psdsim.sim.records import DECODE, StepRecord, StepRows, row
from psdsim.sim.requests import PREFILLING, RequestTable
from psdsim.sim.scenario import Scenario
from psdsim.sim.scheduler import EngineHooks, Scheduler, StepPlan
from psdsim.sim.timeline import Timeline

# 1 as a 0-d array: numpy 2 adds it to an array in about half the time it takes to add a Python
# int, whose type it must first resolve (NEP 50); the sums are the same.
ONE = np.array(1)


@dataclass
class SimContext:
    env: Time   # the plain clock, or SimPy where work runs beside the steps
    scenario: Scenario
    cost: StepCost
    rng: np.random.Generator
    table: RequestTable
    scheduler: Scheduler
    verifier: Verifier
    link: Link
    vocab: int
    acceptance: AcceptanceSampler
    layout: Layout                   # where the method puts its models, computed once per run
    drafter: Drafter | None = None   # the drafter GPU(s); None without a draft model
    hidden: int = 0              # the target's hidden size when the draft is an EAGLE head
    steps: StepRows = field(default_factory=StepRows)   # records.row of each step, packed
    timeline: Timeline | None = None  # records the run's work when asked (sim/timeline.py)
    slow: Slowdowns = NO_SLOWDOWNS    # a profile's measured slowdowns this run pays (sim/overlap.py)
    overlap_prefill: bool = False     # the drafter prefills beside the target (overlap_draft_prefill)
    # per request, whether its drafts were all accepted at its last verification: vLLM V0's
    # MultiStepWorker drafts one extra row for it (None: the engine does not, sim/execution.py)
    all_accepted: np.ndarray | None = None
    # whether the steps now mean to score drafts: a verification without any is a wasted one
    # only then (False while the adaptive mode runs AR steps)
    speculating: bool = True


class EngineMethod(EngineHooks):
    """Base of the methods: holds the context and the scheduler hooks' defaults."""

    # whether the run is V engines sharing drafter GPUs (sim/decoupled_run.py), not one engine
    shares_drafters = False

    def __init__(self, sim: SimContext) -> None:
        self.sim = sim
        self.lookahead = sim.scenario.k if sim.scenario.speculates else 0

    @staticmethod
    def running_cap(s: Scenario) -> int:
        """Cap on the running set (max_num_seqs): m, or N x m for PSD's N sub-batches."""
        return s.m

    @staticmethod
    def needs_events(s: Scenario) -> bool:
        """Whether work runs beside the steps in simulated time (SimPy); False: every step is
        priced in advance and a plain clock runs the run (sim/clock.py)."""
        return False

    @staticmethod
    def gpus(s: Scenario) -> int:
        return layout_for(s).gpus

    def step(self, plan: StepPlan) -> Generator[Any, Any, None]:
        """Execute one planned engine step in simulated time (each method its own)."""
        raise NotImplementedError

    def step_columns(self) -> dict[str, np.ndarray]:
        """Step-table columns of the method's own, a value per step, beside the StepRecord's
        (none here: only the adaptive mode says which mode ran each step)."""
        return {}

    def quiet_steps(self, plan: StepPlan) -> int:
        """Run `plan` and the steps after it at once where nothing but decoding happens (a
        method's own shortcut, closed as the steps would be); returns the steps run, 0 for none
        (then `step` runs `plan`)."""
        return 0

    def run_warnings(self) -> list[str]:
        """What the run met that the emulated code would not have survived (none here)."""
        return []


def draft_rows(sim: SimContext, slots: np.ndarray, rec: StepRecord | None) -> int:
    """Rows a drafting of `slots` runs: one each, and one more for every request whose drafts were
    all accepted where the engine drafts that extra row (counted in the step's extra_rows; None:
    drafting outside any step)."""
    if sim.all_accepted is None or not len(slots):
        return len(slots)
    extra = int(np.count_nonzero(sim.all_accepted[slots]))
    if rec is not None:
        rec.extra_rows += extra
    return len(slots) + extra


def draft_counts(plan: StepPlan, slots: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Draft tokens each verified request gets scored: what was drafted, capped by the vllm-v1
    budget when the plan truncates drafts."""
    if plan.spec_cap is None:
        return wanted
    cap = dict(zip(plan.decode.tolist(), plan.spec_cap.tolist(), strict=True))
    return np.minimum(wanted, np.array([cap[r] for r in slots.tolist()], dtype=np.int64))


def verify_outcome(sim: SimContext, rec: StepRecord, slots: np.ndarray, proposed: np.ndarray,
                   total_proposed: int) -> None:
    """Draw acceptance for verified requests, emit accepted + 1 tokens each, update stats.
    `total_proposed` is proposed.sum(), which every caller already knows."""
    if not len(slots):
        return
    if total_proposed:
        accepted = sim.acceptance.accepted(sim.table.log_acceptance[slots], proposed)
    else:
        accepted = proposed   # all zeros, never written: no second array needed
    emit_outcome(sim, rec, slots, proposed, total_proposed, accepted)


def emit_outcome(sim: SimContext, rec: StepRecord, slots: np.ndarray, proposed: np.ndarray,
                 total_proposed: int, accepted: np.ndarray) -> None:
    """Emit accepted + 1 tokens for each verified request, log the verification, count it."""
    t, n = sim.table, len(slots)
    if sim.all_accepted is not None:
        sim.all_accepted[slots] = accepted >= np.maximum(proposed, ONE)   # proposed > 0, all accepted
    if total_proposed:
        total_accepted = isum(accepted)
        unproposed = n - np.count_nonzero(proposed)
    else:   # nothing proposed, nothing accepted
        total_accepted = 0
        unproposed = n if sim.speculating and sim.scenario.method != "ar" else 0
    kept = t.emit(slots, accepted + ONE)
    t.log_verification(slots, proposed, accepted)
    rec.proposed, rec.accepted, rec.unproposed = total_proposed, total_accepted, unproposed
    rec.generated = total_accepted + n if kept is None else isum(kept)


def emit_first_tokens(sim: SimContext, plan: StepPlan) -> int:
    """Prompts whose prefill completed sample a token (the first, or the next after a recompute)."""
    if not len(plan.prefill):
        return 0
    done = plan.prefill[plan.completes]
    if not len(done):
        return 0
    t = sim.table
    kept = t.emit(done, np.ones(len(done), dtype=np.int64))
    t.first_token(done, sim.env.now)
    return len(done) if kept is None else isum(kept)


def record(sim: SimContext, plan: StepPlan, start: float, rec: StepRecord) -> None:
    """Close the step: prompts that completed emit their first token, the drafter is charged
    the step's own work, and the record gets what the plan and the running set say."""
    prefill = len(plan.prefill)
    if prefill:
        rec.generated += emit_first_tokens(sim, plan)
        rec.prefill_tokens, rec.prompts_done = isum(plan.chunk), isum(plan.completes)
    if sim.drafter is not None:
        sim.drafter.busy_s += rec.drafter_s
    running = sim.scheduler.running
    if rec.verified:
        rec.kind = DECODE
    rec.start_s, rec.end_s, rec.running = start, sim.env.now, len(running)
    if prefill or sim.scheduler.chunked:
        rec.prefilling = int(np.count_nonzero(sim.table.state[running] == PREFILLING))
    if rec.batch0 is None:
        rec.batch0 = len(running) - rec.prefilling
    rec.preempted, rec.kv_blocks, rec.waiting = plan.preempted, plan.kv_blocks, plan.waiting
    rec.prefill_groups = plan.prefill_groups
    sim.steps.append(row(rec))
