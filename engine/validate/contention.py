"""How much slower each model runs while the other one computes: the contention microbenchmark.

SD traces never overlap drafting with a target pass, so they cannot show what PSD and PEARL pay
for overlapping them on shared hardware (here two cores of one CPU: a shared last-level cache and
memory bus). This measures it directly, with the engine's own models, on the engine's own cores:
two processes, pinned as the engine pins its driver and verifier, one thread each.

- drafter: one drafting of `m` requests, k passes (the engine's Drafter does k passes per
  drafting), each request with `ctx` cached tokens;
- verifier: one target pass scoring k + 1 tokens for each of `m` requests with `ctx` cached.

Each round times a side's call back to back while the other side is idle (blocked on its pipe)
and while the other side runs its own call back to back; the order of the two alternates from
round to round, and the factor is the median over rounds of the paired ratio (concurrent / alone),
so slow drift of a shared machine cancels. The profile records the factors with this provenance
(sim/overlap.py prices the overlap with them).

The same rounds also time each side's call after its process slept 1, 2, 4, 8 and 16 ms (the
other side idle), against back to back: `after_idle`, the slowdown of work that follows an idle
period (sim/overlap.py applies it to the verifier's pass after its idle time and to the driver's
work after its wait for the verifier). In one `psdsim validate` run with the defaults on this
project's shared 2-core VM, drafting ran ×1.12, 1.21, 1.34, 1.38 and 1.34 slower after 1, 2, 4,
8 and 16 ms idle, the target pass ×1.01 to 1.09; in that run's traces the verifier of SD with the
target in its own process idled ~5 ms a step at k = 1 (its pass 11.0 ms, against 9.2 ms in
one-process SD, never idle), and PSD's driver waited 8.5 ms a step at k = 1 and 1.8 ms at k = 5.
"""

from __future__ import annotations

import os
import pickle
import statistics
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from psdsim.engine.reference.config import ModelConfig

ROUNDS = 12
CALLS = {"draft": 8, "verify": 5}   # timed calls per side per condition and round
IDLE_GAPS_S = (0.001, 0.002, 0.004, 0.008, 0.016)   # a call after the process idled this long


@dataclass(frozen=True)
class Shape:
    m: int
    k: int
    ctx: int


def _worker(conn: Connection, side: str, core: int | None, model: ModelConfig, shape: Shape) -> None:
    from psdsim.engine.reference.model import Packed, build_draft, build_target
    from psdsim.engine.reference.workers import pin

    pin(core)   # as the engine pins its driver and verifier
    max_len = shape.ctx + 2 * shape.k + 4
    net = (build_draft if side == "draft" else build_target)(model, max_len)
    cache = net.new_cache(shape.m)
    slots = list(range(shape.m))

    def call() -> None:
        if side == "draft":
            for j in range(shape.k):
                batch = Packed.build(slots, [shape.ctx + j] * shape.m, [[1]] * shape.m, "cpu")
                net(batch, cache, batch.last_rows())
        else:
            batch = Packed.build(slots, [shape.ctx] * shape.m, [[1] * (shape.k + 1)] * shape.m, "cpu")
            net(batch, cache, None)

    for _ in range(3):
        call()
    conn.send_bytes(pickle.dumps("ready"))
    while (cmd := pickle.loads(conn.recv_bytes())) is not None:
        if cmd == "loop":               # run until told to stop: the other side's load
            while not conn.poll():
                call()
            conn.recv_bytes()
            conn.send_bytes(pickle.dumps([]))
            continue
        calls, gap = cmd
        times = []
        for _ in range(calls + 1):  # the first call after a change of condition is not timed
            if gap:
                time.sleep(gap)
            t = time.perf_counter()
            call()
            times.append(time.perf_counter() - t)
        conn.send_bytes(pickle.dumps(times[1:]))
    conn.close()


def measure_contention(model: ModelConfig, shape: Shape, rounds: int = ROUNDS) -> dict[str, Any]:
    """{"draft": f, "verify": f, "after_idle": {side: [[idle_s, f], ...]}, "source": {...}}: each
    side's slowdown while the other computes, and after its process idled."""
    import torch

    cores = sorted(os.sched_getaffinity(0))
    two = len(cores) > 1   # as the engine: a core each where there are two, else both share one
    placement = {"draft": cores[0] if two else None, "verify": cores[1] if two else None}
    ctx = torch.multiprocessing.get_context("forkserver")
    conns: dict[str, Connection] = {}
    procs = []
    try:
        for side in ("draft", "verify"):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(child, side, placement[side], model, shape), daemon=True,
                            name=f"psdsim-contention-{side}")
            p.start()
            child.close()
            conns[side], procs = parent, [*procs, p]
        for c in conns.values():
            pickle.loads(c.recv_bytes())
        ratios: dict[str, list[float]] = {"draft": [], "verify": []}
        alone: dict[str, list[float]] = {"draft": [], "verify": []}
        idle: dict[tuple[str, float], list[float]] = {(side, g): [] for side in alone for g in IDLE_GAPS_S}
        for r in range(rounds):
            for side, other in (("draft", "verify"), ("verify", "draft")):
                got = {}
                conds = ["alone", "busy", *IDLE_GAPS_S]
                for cond in (conds if r % 2 == 0 else conds[::-1]):
                    if cond == "busy":
                        conns[other].send_bytes(pickle.dumps("loop"))
                        time.sleep(0.005)
                    gap = cond if isinstance(cond, float) else 0.0
                    conns[side].send_bytes(pickle.dumps((CALLS[side], gap)))
                    got[cond] = statistics.median(pickle.loads(conns[side].recv_bytes()))
                    if cond == "busy":
                        conns[other].send_bytes(pickle.dumps("stop"))
                        pickle.loads(conns[other].recv_bytes())
                ratios[side].append(got["busy"] / got["alone"])
                alone[side].append(got["alone"])
                for g in IDLE_GAPS_S:
                    idle[(side, g)].append(got[g] / got["alone"])
        for c in conns.values():
            c.send_bytes(pickle.dumps(None))
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    factors: dict[str, Any] = {side: statistics.median(v) for side, v in ratios.items()}
    factors["after_idle"] = {side: [[g, statistics.median(idle[(side, g)])] for g in IDLE_GAPS_S]
                             for side in alone}
    spread = {side: [min(v), max(v)] for side, v in ratios.items()}
    return {
        **factors,
        "source": {
            "method": "engine/validate_contention.py: paired rounds, each side's call timed back to back "
                      "alone and while the other side runs its call back to back; median of "
                      "the per-round ratios",
            "rounds": rounds, "calls_per_condition": dict(CALLS),
            "shape": {"m": shape.m, "k": shape.k, "ctx": shape.ctx},
            "cores": [placement["draft"], placement["verify"]],
            "ratio_range": spread,
            "alone_ms": {side: 1e3 * statistics.median(v) for side, v in alone.items()},
            "after_idle_range": {side: [[min(idle[(side, g)]), max(idle[(side, g)])] for g in IDLE_GAPS_S]
                                 for side in alone},
        },
    }
