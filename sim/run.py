"""simulate(scenario) -> Result: build the model, run the engine loop, summarise."""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from psdsim.sim.acceptance import AcceptanceSampler
from psdsim.sim.clock import Clock, run_clocked
from psdsim.sim.costs import StepCost, complete
from psdsim.sim.decoupled_run import run_service, service_rates
from psdsim.sim.devices import Drafter, Link, Verifier
from psdsim.sim.execution import step_cost
from psdsim.sim.footprint import check_memory
from psdsim.sim.kv import KVPools
from psdsim.sim.layout import NONE, layout_for
from psdsim.sim.memory import MemoryPlan, plan_memory
from psdsim.sim.methods import method_class
from psdsim.sim.methods.common import SimContext
from psdsim.sim.metrics import infeasible_summary, summarize
from psdsim.sim.model_error import with_model_error
from psdsim.sim.overlap import slowdowns
from psdsim.sim.profile import FittedCost
from psdsim.sim.profile_match import source_warnings
from psdsim.sim.profile_reader import load_profile
from psdsim.sim.records import step_table
from psdsim.sim.requests import RequestTable
from psdsim.sim.scenario import Scenario, catalog_for, validate
from psdsim.sim.scenario import warnings as scenario_warnings
from psdsim.sim.scheduler import scheduler_for
from psdsim.sim.timeline import DRAFTER, Timeline, drafter_track
from psdsim.sim.workload import WorkloadStream, workload_stream

Progress = Callable[[float], None]
PROGRESS_EVERY = 512  # engine steps between progress callbacks


@dataclass(frozen=True)
class KVUse:
    """The KV pools at the end of a run: invariants say in_use_at_end == 0 and peak <= total."""

    total_blocks: int          # blocks of the binding pool
    peak_blocks: int
    in_use_at_end: int
    pools: dict[str, int]      # blocks per pool (GPU group)
    binding: str               # the pool with the fewest blocks


@dataclass(frozen=True)
class Result:
    scenario: Scenario
    summary: dict[str, Any]
    steps: dict[str, np.ndarray]
    requests: dict[str, np.ndarray]
    memory: MemoryPlan
    kv: KVUse | None  # None when the scenario does not fit
    wall_s: float  # host time the simulation took; not part of the (deterministic) summary
    timeline: Timeline | None = None  # recorded slices, when simulate(..., timeline=True)

    @property
    def fits(self) -> bool:
        return bool(self.summary["fits"])


def _engine_loop(sim: SimContext, method: Any,
                 progress: Progress | None) -> Generator[Any, Any, None]:
    """The driver: each iteration plans one engine step, executes it, then closes it (or runs the
    quiet stretch the method starts with that plan, sim/methods/ar.py)."""
    env, sched, tl = sim.env, sim.scheduler, sim.timeline
    steps, report_at = 0, PROGRESS_EVERY
    while not sched.done:
        sched.arrive_until(env.now)
        plan = sched.plan(method, env.now)
        if plan.empty:
            nxt = sched.next_arrival_s()
            if math.isinf(nxt):
                raise RuntimeError("engine stalled: nothing running, nothing admissible")
            yield env.timeout(nxt - env.now)
            continue
        quiet = method.quiet_steps(plan)
        if quiet:
            steps += quiet
        else:
            if tl is not None:
                tl.step = steps
            yield from method.step(plan)
            sched.close_step(plan, env.now, method)
            steps += 1
        if progress is not None and steps >= report_at:
            progress(sched.ended / sim.table.n)
            report_at = steps + PROGRESS_EVERY


def simulate(s: Scenario, *, cost: StepCost | None = None, progress: Progress | None = None,
             timeline: bool = False) -> Result:
    """Simulate one scenario. `cost` replaces the analytic cost model (tests, fitted profiles);
    `timeline` records every piece of work for sim/timeline.py (off: no cost, same results)."""
    began = time.perf_counter()
    s = validate(s)
    check_memory([s], traced=timeline)   # the API refuses what the CLI refuses, before any work
    cat = catalog_for(s)
    memory = plan_memory(s, cat)
    if not memory.fits:
        assert memory.reason is not None
        summary = infeasible_summary(s, memory.reason, method_class(s).gpus(s))
        summary["warnings"] = scenario_warnings(s)
        return Result(s, summary, {}, {}, memory, None, time.perf_counter() - began)

    rng = np.random.default_rng(s.seed)
    stream = workload_stream(s, cat, rng)
    table = RequestTable(stream)
    kind = method_class(s)
    events = kind.needs_events(s)   # else every step is priced in advance: a plain clock will do
    env = simpy.Environment() if events else Clock()
    if cost is None:
        cost = step_cost(s, cat)
        if s.profile:
            profile = load_profile(s.profile)
            cost = FittedCost(profile, cost)
    priced = complete(cost)
    cost = with_model_error(priced, s)
    target = cat.models[s.target]
    prior = cat.acceptance_prior(s.draft, s.target)   # its per-position factors shape every request's rate
    factors = prior.per_position if prior is not None else ()
    hidden = target.hidden if s.speculates and cat.models[s.draft].eagle else 0
    if kind.shares_drafters:
        return _service_result(s, memory, cost, priced, rng, stream, factors, target.vocab, hidden, timeline,
                               progress, began)
    tl = Timeline() if timeline else None
    link = Link(env, cost.broadcast, cost.comm, tl)
    kv = KVPools(memory.pools(), s.block_size, table.capacity)
    scheduler = scheduler_for(s, table, kv, memory.swap_blocks(s.swap_space_gb), kind.running_cap(s))
    layout = layout_for(s)
    dedicated = layout.over_link   # the drafter has a device (a process) of its own
    slow = slowdowns(cost, dedicated)
    drafter = None
    if layout.drafter != NONE:
        gpus = max(1, layout.drafter_gpus)
        tracks = [DRAFTER] if gpus == 1 else [drafter_track(i) for i in range(gpus)]
        drafter = Drafter(env, tracks, tl, slow.driver_idle, slow.overlap, workers=events)
    sim = SimContext(env=env, scenario=s, cost=cost, rng=rng, table=table, scheduler=scheduler,
                     verifier=Verifier(env, link, tl, slow.verifier_idle), link=link, vocab=target.vocab,
                     acceptance=AcceptanceSampler(rng, factors), layout=layout, drafter=drafter,
                     hidden=hidden,
                     timeline=tl, slow=slow, overlap_prefill=s.overlap_draft_prefill and dedicated)
    if drafter is not None and slow.overlap is not None:   # worker drafting and passes contend
        drafter.verifier, sim.verifier.drafter = sim.verifier, drafter
    if cost.extra_draft_rows and s.speculates:
        sim.all_accepted = np.zeros(table.capacity, dtype=bool)
        table.track(sim, "all_accepted")
    method = kind(sim)
    loop = _engine_loop(sim, method, progress)
    if isinstance(env, Clock):
        run_clocked(loop)
    else:
        env.run(until=env.process(loop))

    steps = {**step_table(sim.steps), **method.step_columns()}
    requests = table.columns()
    # Figures that overflow or come out NaN (from absurd inputs) are refused by name in
    # summarize (sim/valid_figures.py), not left to numpy's warnings.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        summary = summarize(s, steps, requests, gpus=layout.gpus, speculates=s.speculates,
                            drafter_busy_s=drafter.busy_s if drafter is not None else 0.0,
                            verifier_busy_s=sim.verifier.busy_s, kv=kv)
    summary["warnings"] = _run_warnings(s, memory, method.run_warnings(), stream.warnings, priced)
    if progress is not None:
        progress(1.0)
    usage = KVUse(kv.total, kv.peak, kv.used, dict(kv.capacities), kv.binding)
    return Result(s, summary, steps, requests, memory, usage, time.perf_counter() - began, tl)


def _run_warnings(s: Scenario, memory: MemoryPlan, method: list[str], stream: list[str],
                  priced: StepCost) -> list[str]:
    """What a finished run warns of: the scenario, its memory, the method, the workload and a
    fitted profile's source."""
    out = scenario_warnings(s) + memory.warnings + method + stream
    if isinstance(priced, FittedCost):
        out += source_warnings(priced.profile, s) + priced.warnings()
    return out


def _service_result(s: Scenario, memory: MemoryPlan, cost: StepCost, priced: StepCost,
                    rng: np.random.Generator, stream: WorkloadStream, factors: tuple[float, ...], vocab: int,
                    hidden: int, timeline: bool, progress: Progress | None, began: float) -> Result:
    """A decoupled drafter service's run (sim/decoupled_run.py): V replicas, their tables merged,
    summarised as one deployment."""
    run = run_service(s, memory, cost, rng, stream, factors, vocab, hidden, timeline, _engine_loop)
    kv = run.kv
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        summary = summarize(s, run.steps, run.requests, gpus=layout_for(s).gpus, speculates=True,
                            drafter_busy_s=run.drafter_busy_s, verifier_busy_s=run.verifier_busy_s, kv=kv)
    service_rates(summary, s.service_verifiers, run.verifier_busy_s)
    summary["warnings"] = _run_warnings(s, memory, [], stream.warnings, priced)
    if progress is not None:
        progress(1.0)
    usage = KVUse(kv.total, kv.peak, run.kv_in_use_at_end, dict(kv.capacities), kv.binding)
    wall_s = time.perf_counter() - began
    return Result(s, summary, run.steps, run.requests, memory, usage, wall_s, run.timeline)


def compare_methods(s: Scenario, methods: Sequence[str], *,
                    progress: Callable[[str, float], None] | None = None) -> dict[str, Result]:
    """Simulate the same scenario and seed under each method (the same requests for all)."""
    out = {}
    for m in methods:
        report = (lambda f, m=m: progress(m, f)) if progress else None
        out[m] = simulate(s.replace(method=m), progress=report)
    return out
