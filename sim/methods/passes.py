"""A step's target pass and the driver's work after it, for every method.

`TargetPass` owns what the pass costs: its prefill chunks' work, the bytes its inputs and sampler
output put on the link, the contention with drafting that runs beside it (sim/overlap.py), and
what the step's figures say of it (verify_s, comm_s, link_critical_s). `book_after_pass` is the
driver's work once the pass is back: what is left of the draft model's prompt pass, rejection
sampling, the framework overhead and KV swaps, slowed by the drafter's idling where a profile
measured it.

`booked_step` is the step that SD, PEARL and MineDraft's PSD share once their drafts are ready:
the driver prepares the pass, hands it over, drafts beside it (PEARL, PSD) and does its work
after it, every part priced in turn from the step's start and waited for once, at its end.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from psdsim.sim.costs import NO_CHUNKS, NO_PARTS, Chunks
from psdsim.sim.devices import TO_DRAFTER, TO_VERIFIER, AfterPassJob, VerifyJob, wait_until
from psdsim.sim.execution import DRIVER_PREP
from psdsim.sim.messages import sampler_output, step_inputs
from psdsim.sim.methods.common import SimContext, draft_rows
from psdsim.sim.numbers import isum
from psdsim.sim.overlap import overlapped
from psdsim.sim.records import StepRecord
from psdsim.sim.scheduler import StepPlan
from psdsim.sim.timeline import DRAFT_PREFILL, DRAFTER, DRIVER, ON_DRAFTER, ON_DRIVER, REJECT, driver_parts


def chunk_work(sim: SimContext, plan: StepPlan) -> Chunks:
    """The prefill work of a plan: each chunk attends to its prompt's earlier chunks and itself."""
    if not len(plan.prefill):
        return NO_CHUNKS
    computed = sim.table.computed[plan.prefill]
    chunk = plan.chunk
    pairs = float(isum(chunk * computed) + isum(chunk * chunk) / 2)
    return Chunks(isum(chunk), pairs, isum(computed), isum(plan.completes), len(plan.prefill))


def link_messages(sim: SimContext, requests: int, scored: int, context: int,
                  chunks: Chunks) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the inputs broadcast to the verifier group, the sampler output back) of one target pass,
    as the messages they are sent in (sim/messages.py); with `transfers = "one-message"`, one
    message each way."""
    s = sim.scenario
    sampled = scored + chunks.completing
    inputs = step_inputs(requests + chunks.prompts, scored + chunks.tokens, sampled, context + chunks.ctx,
                         s.block_size)
    output = sampler_output(sampled, sim.vocab, sim.hidden, chunks.tokens, s.sampler_output == "compact")
    if s.transfers == "one-message":
        return (sum(inputs),), (sum(output),)
    return inputs, output


def link_seconds(sim: SimContext, requests: int, context: int,
                 chunks: Chunks) -> Callable[[int], tuple[float, float]]:
    """Seconds the step's messages hold the link, as a function of the positions the target pass
    scores (adaptive k prices each choice with it): (beside the pass, after both the pass and the
    drafting beside it). With `transfers = "per-tensor"` the output is received once the driver
    has drafted (booked_step), so it comes after; otherwise both ways are beside the pass."""
    rendezvous = sim.scenario.output_after_drafting

    def seconds(scored: int) -> tuple[float, float]:
        inputs, output = link_messages(sim, requests, scored, context, chunks)
        inputs_s, output_s = sim.link.seconds(TO_VERIFIER, inputs), sim.link.seconds(TO_DRAFTER, output)
        return (inputs_s, output_s) if rendezvous else (inputs_s + output_s, 0.0)

    return seconds


class TargetPass:
    """One target pass: `requests` decodes scoring `tokens` positions over `context` cached
    tokens, plus the plan's prefill chunks; over the link when the drafter has a GPU of its own."""

    __slots__ = ("chunks", "job", "parts", "prep_s", "requests", "sim", "tokens")

    def __init__(self, sim: SimContext, requests: int, tokens: int, context: int, chunks: Chunks,
                 over_link: bool = True) -> None:
        self.sim = sim
        cost = sim.cost
        job = self.job = VerifyJob(cost.verify(requests, tokens, context, chunks))
        self.requests, self.tokens, self.chunks = requests, tokens, chunks
        self.parts = cost.verify_parts(requests, tokens, chunks)
        if over_link:
            job.inputs, job.output = link_messages(sim, requests, tokens, context, chunks)

    def contend(self, drafting: float) -> float:
        """Price the contention of this pass with `drafting` seconds (alone) that the driver
        starts beside it now (sim/overlap.py): returns the drafting's wall time and slows the
        pass. (Drafting on drafter workers is priced by the devices, sim/devices.py.)"""
        overlap = self.sim.slow.overlap
        if drafting and overlap is not None:
            job = self.job
            inputs_s = self.sim.link.seconds(TO_VERIFIER, job.inputs)
            drafting, job.compute_s = overlapped(drafting, job.compute_s, inputs_s, *overlap)
        return drafting

    def prepared(self, rec: StepRecord, at: float) -> float:
        """The driver's input preparation from `at` before it hands the pass over and drafts
        (MineDraft: the target inputs and the metadata broadcast; 0 on other engines), a part of
        draft_s. Returns when it ends."""
        sim = self.sim
        seconds = self.prep_s = sim.cost.driver_prep(self.requests, self.tokens) if self.requests else 0.0
        if not seconds:
            return at
        end = at + seconds
        rec.prep_s += seconds
        rec.draft_s += seconds
        if sim.timeline is not None:
            sim.timeline.add(DRIVER, DRIVER_PREP, ON_DRIVER, at, end)
        return end

    def book(self, at: float, received_from: float | None = None) -> float:
        """Serve the pass from `at` on a verifier that nothing else can slow (Verifier.book);
        returns when its output is back. `received_from`: when the driver, busy until then,
        posts its receive of the output (None: the output leaves when the pass ends)."""
        return self.sim.verifier.book(self.job, at, received_from)

    def queue(self) -> simpy.Event:
        """Hand the pass to the verifier in SimPy (the PSD ring: drafting may slow it)."""
        return self.sim.verifier.queue(self.job)

    def label(self, name: str, sub_batch: int | None = None, k: int | None = None,
              drafts_used: bool | None = None) -> None:
        """Name the pass's timeline slice and its labels (None: not said); nothing where the run
        records no timeline."""
        if self.sim.timeline is None:
            return
        args: dict[str, Any] = {}
        if sub_batch is not None:
            name, args["sub_batch"] = f"{name} B{sub_batch}", sub_batch
        if k is not None:
            args["k"] = k
        if drafts_used is not None:
            args["drafts_used"] = drafts_used
        self.job.name, self.job.args = name, args

    def measured(self, rec: StepRecord, beside: float | None = None, rendezvous: bool = False) -> None:
        """The pass's figures, once it is back. `beside`: the drafting the driver did while the
        pass ran (None: none); a free link shortens the step by the transfers only where they
        outlast that drafting, or, with `rendezvous` (the output moves once the driver has
        drafted), by the inputs' part of that and the whole output."""
        job = self.job
        compute = rec.verify_s = job.compute_s
        transfer = rec.comm_s = job.inputs_s + job.output_s
        rec.return_s = job.output_s
        if self.parts is not NO_PARTS:
            rec.verify_prep_s, rec.timer_s, rec.sample_s = self.parts
        if beside is None:
            rec.link_critical_s = transfer
        elif rendezvous:
            rec.link_critical_s = max(job.inputs_s + compute, beside) + job.output_s - max(compute, beside)
        else:
            rec.link_critical_s = max(transfer + compute, beside) - max(compute, beside)


def queue_after_pass(sim: SimContext, plan: StepPlan, rec: StepRecord, chunks: Chunks, tokens: int,
                     scored: bool, waited_from: float, emitting: int) -> Generator[Any, Any, None]:
    """The driver's work once the target pass is back (see `book_after_pass`), in a PSD ring,
    whose drafters draft in the background: the drafter's part (the draft model's prompt pass,
    rejection sampling) waits for a free drafter worker, and the driver's part follows it."""
    env, drafter, tl = sim.env, sim.drafter, sim.timeline
    assert drafter is not None
    sync_s, reject_s, swap_s, overhead = _after_pass_work(sim, plan, rec, chunks, tokens, scored, DRAFTER,
                                                          emitting)
    if sync_s + reject_s:
        yield drafter.queue(AfterPassJob(((DRAFT_PREFILL, sync_s), (REJECT, reject_s)), waited_from),
                             urgent=True)
    rec.draft_s += sync_s
    on_cpu = env.now
    yield env.timeout(overhead + swap_s)
    if tl is not None:
        tl.after(on_cpu, env.now, driver_parts(overhead, swap_s))


def _after_pass_work(sim: SimContext, plan: StepPlan, rec: StepRecord, chunks: Chunks, tokens: int,
                     scored: bool, reject_on: str | None, emitting: int) -> tuple[float, float, float, float]:
    """(draft prompt pass, rejection sampling, swaps, framework) seconds alone, after a pass."""
    cost = sim.cost
    sync_s = cost.draft_chunks(chunks) if reject_on is not None else 0.0
    reject_s = cost.reject(tokens) if scored else 0.0
    swap_s = rec.swap_s = cost.swap(plan.swap_blocks)
    overhead = rec.framework_s = cost.framework(len(sim.scheduler.running), emitting)
    return sync_s, reject_s, swap_s, overhead


def book_after_pass(sim: SimContext, plan: StepPlan, rec: StepRecord, chunks: Chunks, tokens: int,
                    scored: bool, waited_from: float, now: float, reject_on: str | None = DRAFTER,
                    emitting: int = 0) -> float:
    """The driver's work once the target pass is back at `now` (it waited from `waited_from`),
    run in one go by the driver (MineDraft's driver runs on its drafter GPU): what is left of the
    draft model's prompt pass, rejection sampling of the `tokens` scored positions (if `scored`),
    the step overhead and swaps. Returns when it ends. The drafter's part is slowed by its idling
    where a profile measured it and drawn on the drafter's track, rejection sampling on the
    drafter's GPU or, with `reject_on` = DRIVER, on the driver's; None: no draft model. The
    framework work is the engine's for the running set and the `emitting` requests whose outputs
    it processes (sim/execution.framework)."""
    drafter, tl = sim.drafter, sim.timeline
    sync_s, reject_s, swap_s, overhead = _after_pass_work(sim, plan, rec, chunks, tokens, scored, reject_on,
                                                          emitting)
    idle = sim.slow.driver_idle
    after_wait = idle(now - waited_from) if idle is not None else 1.0
    if drafter is not None:
        drafter.slowdown[0] = after_wait
    # with overlap_prefill the draft's prompt pass ran beside the target's: only the rest is left
    left = max(0.0, waited_from + sync_s - now) if sim.overlap_prefill and sync_s else sync_s
    left_s = left * after_wait   # what is left runs after the wait, slowed by it
    reject_s *= after_wait
    end = now + (left_s + reject_s + overhead + swap_s)
    rec.draft_s += sync_s
    rec.drafter_s += sync_s
    if reject_on == DRAFTER:
        rec.drafter_s += reject_s
    if tl is not None:
        if left < sync_s:  # the overlapped part ran beside the target pass
            tl.add(DRAFTER, DRAFT_PREFILL, ON_DRAFTER, waited_from, waited_from + sync_s - left)
        reject = (DRAFTER, REJECT, ON_DRAFTER) if reject_on == DRAFTER else (DRIVER, REJECT, ON_DRIVER)
        tl.after(now, end, [(DRAFTER, DRAFT_PREFILL, ON_DRAFTER, left_s), (*reject, reject_s),
                            *driver_parts(overhead, swap_s)])
    return end


@dataclass(slots=True)
class Drafting:
    """Drafting that the driver runs on drafter 0 and waits for within its step: `seconds` of
    work, and its timeline slice's name and labels."""

    seconds: float
    name: str
    batch: int
    k: int
    sub_batch: int | None = None


def drafting_s(sim: SimContext, rec: StepRecord, slots: np.ndarray, k: int, context: int) -> float:
    """Seconds alone of the driver drafting `slots`, k tokens each over `context` cached tokens,
    on drafter 0: slowed after its idling, with the engine's extra rows (counted in the step)."""
    assert sim.drafter is not None
    return sim.cost.draft(draft_rows(sim, slots, rec), k, context) * sim.drafter.slowdown[0]


def drafting_of(sim: SimContext, rec: StepRecord, slots: np.ndarray, k: int, context: int, name: str,
                sub_batch: int | None = None) -> Drafting:
    """The driver's drafting of `slots`, k tokens each over `context` cached tokens, priced
    (`drafting_s`; nothing to draft at k = 0) and named for the timeline."""
    return Drafting(drafting_s(sim, rec, slots, k, context) if k else 0.0, name, len(slots), k, sub_batch)


def book_drafting(sim: SimContext, rec: StepRecord, at: float, drafting: Drafting) -> float:
    """Book `drafting` on drafter 0 from `at`, charged to the step's drafting; returns its end."""
    assert sim.drafter is not None
    seconds = drafting.seconds
    end = sim.drafter.book(at, seconds, drafting.name, drafting.batch, drafting.k, drafting.sub_batch)
    rec.draft_s += seconds
    rec.drafter_s += seconds
    return end


def booked_step(sim: SimContext, plan: StepPlan, rec: StepRecord, target: TargetPass, at: float, scored: bool,
                beside: Drafting | None = None, drafter_waits: bool = False,
                reject_on: str | None = DRAFTER) -> Generator[Any, Any, None]:
    """The rest of a step from `at`, when nothing else runs beside it: the driver prepares the
    target's inputs and starts their broadcast, runs `beside` (drafting for a later step, its
    seconds alone; the pass and it slow each other where a profile measured that) while the pass
    runs, receives the sampler output, then does its work after the pass (`book_after_pass`;
    `scored`: rejection sampling runs). Each part is priced in turn, and the step waits once, for
    its end. MineDraft's driver posts the receive only once it has drafted (spec_decode_worker.py,
    `ParallelSpecDecodeWorker`: start_score_proposals, the other batch's get_spec_proposals, then
    score_proposals receives), and a point-to-point transfer moves once both sides have reached
    it: with `transfers = "per-tensor"` the output leaves at the later of the pass's end and the
    drafting's. `drafter_waits`: the drafter's wait for the pass is the step's wait_s, and the
    drafting beside the pass decides how much of the link's time is on the critical path."""
    drafting_s = 0.0
    if beside is not None:
        drafting_s = beside.seconds = target.contend(beside.seconds)
    t = target.prepared(rec, at)
    drafted_at = book_drafting(sim, rec, t, beside) if beside is not None else t
    rendezvous = sim.scenario.output_after_drafting
    back = target.book(t, drafted_at if rendezvous else None)
    now = back if back > drafted_at else drafted_at
    if drafter_waits:
        rec.wait_s = now - drafted_at
    end = book_after_pass(sim, plan, rec, target.chunks, target.tokens, scored, drafted_at, now,
                          reject_on=reject_on, emitting=target.requests)
    yield from wait_until(sim.env, end)
    target.measured(rec, drafting_s if drafter_waits else None, rendezvous)
