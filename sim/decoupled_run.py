"""The decoupled drafter service's run: V verifier replicas side by side in one SimPy
environment, sharing D drafter GPUs and one link, their tables merged into the run's.

Each replica is an engine of its own (request table, KV pools, scheduler, verifier group, engine
loop) serving its share of the requests: request i goes to replica i mod V (round robin, in
arrival order, as a load balancer without feedback would send them). What they share is what
they contend for: the drafter service (sim/drafter_service.DrafterService) and the link's two
lanes (`Link.sharing`). The draft model's KV lives on the drafter GPUs: each replica gets its
share, D/V of one drafter GPU's pool, as the RFC partitions the draft server's state per verify
server.

The merged step table holds every replica's steps in order of start (then replica), with the
method's columns saying which replica ran each; the request table holds every request under its
run-wide index. Figures that sum step time (the paper's throughput) count V replicas' time side
by side, so `service_rates` restates them for the service as a whole.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np
import simpy

from psdsim.sim.acceptance import AcceptanceSampler
from psdsim.sim.costs import StepCost
from psdsim.sim.devices import Link, Verifier
from psdsim.sim.drafter_service import DrafterService
from psdsim.sim.kv import KVPools
from psdsim.sim.layout import layout_for
from psdsim.sim.memory import MemoryPlan
from psdsim.sim.methods.common import SimContext
from psdsim.sim.methods.decoupled import DecoupledReplica
from psdsim.sim.records import step_table
from psdsim.sim.requests import RequestTable
from psdsim.sim.scenario import Scenario
from psdsim.sim.scheduler import scheduler_for
from psdsim.sim.timeline import DRIVER, VERIFIER, Slice, Timeline
from psdsim.sim.workload import Workload, WorkloadStream

EngineLoop = Callable[[SimContext, DecoupledReplica, None], Generator[Any, Any, None]]
# Figures of the summary that divide tokens by the replicas' step time summed.
STEP_TIME_RATES = ("throughput_tok_s", "throughput_tok_s_trim80", "throughput_tok_s_trim70",
                   "throughput_tok_s_per_gpu", "throughput_tok_s_incl_mixed")


class RoutedStream:
    """The requests of one replica: rows `replica`, `replica + V`, ... of the run's stream,
    each keeping its prompt's run-wide index."""

    def __init__(self, stream: WorkloadStream, replicas: int, replica: int) -> None:
        self._stream, self._replicas, self._replica = stream, replicas, replica
        self.n = len(range(replica, stream.n, replicas))
        self.acceptance_mean = stream.acceptance_mean

    def blocks(self) -> Iterator[Workload]:
        base = 0
        for w in self._stream.blocks():
            first = (self._replica - base) % self._replicas
            rows = np.arange(first, len(w), self._replicas)
            if w.prompt is None:   # a request is its own prompt: keep the run-wide index
                w = Workload(w.arrival_s, w.prompt_len, w.output_len, w.acceptance, w.abort_delay_s,
                             prompt=np.arange(base, base + len(w)), acceptance_mean=w.acceptance_mean)
            base += len(w)
            if len(rows):
                yield w.select(rows)


@dataclass(frozen=True)
class ServiceRun:
    """What the replicas left: merged tables, the busiest KV pools, and what each device did."""

    steps: dict[str, np.ndarray]
    requests: dict[str, np.ndarray]
    kv: KVPools                 # the replica whose pools peaked highest
    kv_in_use_at_end: int       # blocks still held at the end, over every replica
    drafter_busy_s: float
    verifier_busy_s: float      # summed over the replicas
    timeline: Timeline | None


def run_service(s: Scenario, memory: MemoryPlan, cost: StepCost, rng: np.random.Generator,
                stream: WorkloadStream, factors: tuple[float, ...], vocab: int, hidden: int,
                timeline: bool, engine_loop: EngineLoop) -> ServiceRun:
    """Run the V replicas to the end of every request (see the module's docstring), each in
    `engine_loop` (sim/run.py's, the one every method runs in) as a process of its own."""
    replicas = s.service_verifiers
    env = simpy.Environment()
    link = Link(env, cost.broadcast, cost.comm)
    service = DrafterService(s.service_drafters)
    pools = _replica_pools(memory.pools(), s.service_drafters, replicas)
    acceptance = AcceptanceSampler(rng, factors)
    layout = layout_for(s)
    sims, methods = [], []
    for r in range(replicas):
        table = RequestTable(RoutedStream(stream, replicas, r))
        kv = KVPools(pools, s.block_size, table.capacity)
        scheduler = scheduler_for(s, table, kv, memory.swap_blocks(s.swap_space_gb), s.m)
        tl = Timeline() if timeline else None
        shared = link.sharing(tl)
        sim = SimContext(env=env, scenario=s, cost=cost, rng=rng, table=table, scheduler=scheduler,
                         verifier=Verifier(env, shared, tl), link=shared, vocab=vocab, acceptance=acceptance,
                         layout=layout, hidden=hidden, timeline=tl)
        method = DecoupledReplica(sim, service, r)
        sims.append(sim)
        methods.append(method)
        if table.n:
            env.process(engine_loop(sim, method, None))
    env.run()
    steps, order = _merged_steps(sims, methods)
    busiest = max((sim.scheduler.kv for sim in sims), key=lambda kv: kv.peak / kv.total)
    left = sum(sim.scheduler.kv.used for sim in sims)
    return ServiceRun(steps, _merged_requests(sims, replicas), busiest, left, service.busy_s,
                      sum(sim.verifier.busy_s for sim in sims), _merged_timeline(sims, order))


def _replica_pools(pools: dict[str, int], drafters: int, replicas: int) -> dict[str, int]:
    """A replica's KV pools: its own verifier group's, and its share of the drafter GPUs'."""
    out = dict(pools)
    if "drafter" in out:
        out["drafter"] = max(1, out["drafter"] * drafters // replicas)
    return out


def _merged_steps(sims: list[SimContext], methods: list[DecoupledReplica]
                  ) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
    """Every replica's steps in order of start, then replica; and, per replica, where each of its
    steps landed in that order."""
    tables = [{**step_table(sim.steps), **method.step_columns()}
              for sim, method in zip(sims, methods, strict=True)]
    joined = {name: np.concatenate([t[name] for t in tables]) for name in tables[0]}
    order = np.lexsort((joined["replica"], joined["start_s"]))
    merged = {name: values[order] for name, values in joined.items()}
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    sizes = np.cumsum([0, *(len(t["start_s"]) for t in tables)])
    return merged, [position[lo:hi] for lo, hi in pairwise(sizes)]


def _merged_requests(sims: list[SimContext], replicas: int) -> dict[str, np.ndarray]:
    """Every request under its run-wide index (replica r's j-th is r + j V), in that order."""
    tables = []
    for r, sim in enumerate(sims):
        t = sim.table.columns() if sim.table.n else None
        if t is not None:
            tables.append({**t, "request": r + replicas * t["request"]})
    joined = {name: np.concatenate([t[name] for t in tables]) for name in tables[0]}
    order = np.argsort(joined["request"], kind="stable")
    return {name: values[order] for name, values in joined.items()}


def _merged_timeline(sims: list[SimContext], order: list[np.ndarray]) -> Timeline | None:
    """The replicas' slices on one timeline: each replica's verifier and driver on tracks of their
    own, every slice's step its step in the merged table."""
    if sims[0].timeline is None:
        return None
    merged = Timeline()
    for r, sim in enumerate(sims):
        assert sim.timeline is not None
        steps = order[r]
        for sl in sim.timeline.slices:
            args: dict[str, Any] = {**sl.args, "step": int(steps[sl.args["step"]])}
            track = replica_track(sl.track, r)
            merged.slices.append(Slice(track, sl.name, sl.cat, sl.start_s, sl.end_s, args))
    return merged


def replica_track(track: str, replica: int) -> str:
    """The track of replica `replica`'s work: its verifier group and its driver are its own; the
    drafter GPUs and the link lanes are shared."""
    return f"{track} {replica}" if track in (VERIFIER, DRIVER) else track


def service_rates(summary: dict[str, Any], replicas: int, verifier_busy_s: float) -> None:
    """Restate the figures over the replicas' summed step time for the service: V replicas run
    side by side, so tokens over their summed step time is one mean replica's rate, and the
    service's is V times that (exact when the replicas are equally busy); the verifier's busy
    fraction is over V groups; comm_share, a drafter's wait for its one verifier, is not a
    shared service's figure (None)."""
    summary["comm_share"] = None
    for name in STEP_TIME_RATES:
        if summary.get(name) is not None:
            summary[name] *= replicas
    if summary.get("verifier_busy") is not None and summary["makespan_s"]:
        summary["verifier_busy"] = verifier_busy_s / (summary["makespan_s"] * replicas)
