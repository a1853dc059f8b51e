"""A step's target pass and the driver's work after it, for every method.

`TargetPass` owns what the pass costs: its prefill chunks' work, the bytes its inputs and sampler
output put on the link, the contention with drafting that runs beside it (sim/overlap.py), and
what the step's figures say of it (verify_s, comm_s, link_critical_s). `after_pass_end` is the
driver's work once the pass is back: what is left of the draft model's prompt pass, rejection
sampling, the framework overhead and KV swaps, slowed by the drafter's idling where a profile
measured it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import simpy
from psdsim.sim.costs import NO_CHUNKS, NO_PARTS, Chunks
from psdsim.sim.devices import TO_DRAFTER, TO_VERIFIER, AfterPassJob, VerifyJob
from psdsim.sim.execution import DRIVER_PREP
from psdsim.sim.messages import hidden_state_bytes, sampler_output_bytes, step_inputs_bytes
from psdsim.sim.methods.common import SimContext
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
    return Chunks(isum(chunk), pairs, isum(computed), isum(plan.completes))


def link_bytes(sim: SimContext, requests: int, scored: int, context: int,
               chunks: Chunks) -> tuple[int, int]:
    """(inputs broadcast to the verifier group, sampler output back) for one target pass."""
    s = sim.scenario
    send = step_inputs_bytes(requests, scored + chunks.tokens, context + chunks.ctx, s.block_size)
    back = sampler_output_bytes(scored + chunks.completing, sim.vocab, s.sampler_output == "compact")
    if sim.hidden:
        back += hidden_state_bytes(scored + chunks.tokens, sim.hidden)
    return send, back


def link_seconds(sim: SimContext, requests: int, context: int, chunks: Chunks) -> Callable[[int], float]:
    """Seconds the step's messages hold the link, both ways, as a function of the positions
    the target pass scores (adaptive k prices each choice with it)."""
    def seconds(scored: int) -> float:
        send, back = link_bytes(sim, requests, scored, context, chunks)
        return sim.link.seconds(TO_VERIFIER, send) + sim.link.seconds(TO_DRAFTER, back)

    return seconds


class TargetPass:
    """One target pass: `requests` decodes scoring `tokens` positions over `context` cached
    tokens, plus the plan's prefill chunks; over the link when the drafter has a GPU of its own."""

    __slots__ = ("job", "parts", "prep_s", "requests", "sim", "tokens")

    def __init__(self, sim: SimContext, requests: int, tokens: int, context: int, chunks: Chunks,
                 over_link: bool = True) -> None:
        self.sim = sim
        cost = sim.cost
        job = self.job = VerifyJob(cost.verify(requests, tokens, context, chunks))
        self.requests, self.tokens = requests, tokens
        self.parts = cost.verify_parts(requests, tokens, chunks)
        if over_link:
            job.send_bytes, job.return_bytes = link_bytes(sim, requests, tokens, context, chunks)

    def contend(self, drafting: float) -> float:
        """Price the contention of this pass with `drafting` seconds (alone) that the driver
        starts beside it now (sim/overlap.py): returns the drafting's wall time and slows the
        pass. (Drafting on drafter workers is priced by the devices, sim/devices.py.)"""
        overlap = self.sim.slow.overlap
        if drafting and overlap is not None:
            job = self.job
            inputs_s = self.sim.cost.broadcast(job.send_bytes)
            drafting, job.compute_s = overlapped(drafting, job.compute_s, inputs_s, *overlap)
        return drafting

    def prepared(self, st: StepRecord, at: float) -> float:
        """The driver's input preparation from `at` before it hands the pass over and drafts
        (MineDraft: the target inputs and the metadata broadcast; 0 on other engines), a part of
        draft_s. Returns when it ends."""
        sim = self.sim
        seconds = self.prep_s = sim.cost.driver_prep(self.requests, self.tokens) if self.requests else 0.0
        if not seconds:
            return at
        end = at + seconds
        st.prep_s += seconds
        st.draft_s += seconds
        if sim.timeline is not None:
            sim.timeline.add(DRIVER, DRIVER_PREP, ON_DRIVER, at, end)
        return end

    def book(self, name: str, at: float, sub_batch: int | None = None, k: int | None = None,
             drafts_used: bool | None = None) -> float:
        """Serve the pass from `at` on a verifier that nothing else can slow (Verifier.book);
        returns when its output is back. The rest labels its timeline slice (None: not said)."""
        if self.sim.timeline is not None:
            self._label(name, sub_batch, k, drafts_used)
        return self.sim.verifier.book(self.job, at)

    def submit(self, name: str, sub_batch: int | None = None, k: int | None = None,
               drafts_used: bool | None = None) -> simpy.Event:
        """Hand the pass to the verifier in SimPy (the PSD ring: drafting may slow it)."""
        if self.sim.timeline is not None:
            self._label(name, sub_batch, k, drafts_used)
        return self.sim.verifier.submit(self.job)

    def _label(self, name: str, sub_batch: int | None, k: int | None, drafts_used: bool | None) -> None:
        """Name the pass's timeline slice (only where the run records a timeline)."""
        args: dict[str, Any] = {}
        if sub_batch is not None:
            name, args["sub_batch"] = f"{name} B{sub_batch}", sub_batch
        if k is not None:
            args["k"] = k
        if drafts_used is not None:
            args["drafts_used"] = drafts_used
        self.job.name, self.job.args = name, args

    def measured(self, st: StepRecord, beside: float | None = None) -> None:
        """The pass's figures, once it is back. `beside`: the drafting the driver did while the
        pass ran (None: none); a free link shortens the step by the transfers only where they
        outlast that drafting."""
        job = self.job
        compute, transfer = st.verify_s, st.comm_s = job.compute_s, job.transfer_s
        if self.parts is not NO_PARTS:
            st.verify_prep_s, st.timer_s, st.sample_s = self.parts
        if beside is None:
            st.link_critical_s = transfer
        else:
            st.link_critical_s = max(transfer + compute, beside) - max(compute, beside)


def queued_after_pass(sim: SimContext, plan: StepPlan, st: StepRecord, chunks: Chunks, tokens: int,
                      scored: bool, waited_from: float, emitting: int) -> Generator[Any, Any, None]:
    """The driver's work once the target pass is back (see `after_pass_end`), in a PSD ring,
    whose drafters draft in the background: the drafter's part (the draft model's prompt pass,
    rejection sampling) waits for a free drafter worker, and the driver's part follows it."""
    env, drafter, tl = sim.env, sim.drafter, sim.timeline
    assert drafter is not None
    sync_s, reject_s, swap_s, overhead = _after_pass_work(sim, plan, st, chunks, tokens, scored, DRAFTER,
                                                          emitting)
    if sync_s + reject_s:
        yield drafter.submit(AfterPassJob(((DRAFT_PREFILL, sync_s), (REJECT, reject_s)), waited_from),
                             urgent=True)
    st.draft_s += sync_s
    on_cpu = env.now
    yield env.timeout(overhead + swap_s)
    if tl is not None:
        tl.after(on_cpu, env.now, driver_parts(overhead, swap_s))


def _after_pass_work(sim: SimContext, plan: StepPlan, st: StepRecord, chunks: Chunks, tokens: int,
                     scored: bool, reject_on: str | None, emitting: int) -> tuple[float, float, float, float]:
    """(draft prompt pass, rejection sampling, swaps, framework) seconds alone, after a pass."""
    cost = sim.cost
    sync_s = cost.draft_chunks(chunks) if reject_on is not None else 0.0
    reject_s = cost.reject(tokens) if scored else 0.0
    swap_s = st.swap_s = cost.swap(plan.swap_blocks)
    overhead = st.framework_s = cost.framework(len(sim.scheduler.running), emitting)
    return sync_s, reject_s, swap_s, overhead


def after_pass_end(sim: SimContext, plan: StepPlan, st: StepRecord, chunks: Chunks, tokens: int,
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
    sync_s, reject_s, swap_s, overhead = _after_pass_work(sim, plan, st, chunks, tokens, scored, reject_on,
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
    st.draft_s += sync_s
    st.drafter_s += sync_s
    if reject_on == DRAFTER:
        st.drafter_s += reject_s
    if tl is not None:
        if left < sync_s:  # the overlapped part ran beside the target pass
            tl.add(DRAFTER, DRAFT_PREFILL, ON_DRAFTER, waited_from, waited_from + sync_s - left)
        reject = (DRAFTER, REJECT, ON_DRAFTER) if reject_on == DRAFTER else (DRIVER, REJECT, ON_DRIVER)
        tl.after(now, end, [(DRAFTER, DRAFT_PREFILL, ON_DRAFTER, left_s), (*reject, reject_s),
                            *driver_parts(overhead, swap_s)])
    return end
