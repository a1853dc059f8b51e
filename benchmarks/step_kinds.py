"""Where the engine loop's time goes, by kind of step.

Why: a shortcut for one kind of step (a quiet stretch of plain decode steps, AR's in
sim/methods/ar.py) can speed the loop up by no more than the share of the time that kind takes.
This script times every step of a run from its plan to its close and classes it:

    decode               a decode step after which no request has ended
    decode, ends         a decode step after which a request has finished or been aborted
    prefill              a step that computes prompt tokens (an admission's, with chunked prefill
                         perhaps beside decodes), "prefill, ends" when a request ended too
    quiet stretch        decode steps a method ran at once (AR), timed together

and prints, per kind, the steps, µs a step and its share of the timed time, and the bound: how
much faster the loop would be if every plain decode step cost nothing. The timers add about a
microsecond a step, so the figures run a little above a plain run's.

    python benchmarks/step_kinds.py [--methods psd,sd,ar] [--engine roofline|default]
                                    [--repeats 3] [--record]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from recording import add_record_flag, write

from psdsim.sim.methods.common import EngineMethod
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario
from psdsim.sim.scheduler import Scheduler

DECODE = "decode"


def _subclasses(cls: type) -> Iterator[type]:
    yield cls
    for sub in cls.__subclasses__():
        yield from _subclasses(sub)


@contextmanager
def timed_steps(tally: dict[str, list[float]]) -> Iterator[None]:
    """Time each step of the runs inside from its plan to its close into `tally` (kind ->
    [steps, seconds]), by wrapping Scheduler.plan, Scheduler.close_step and the methods'
    quiet_steps; everything is restored on the way out."""
    clock = time.perf_counter
    now: dict[str, Any] = {"began": 0.0, "kind": DECODE, "stretch": False}

    def count(kind: str, steps: int) -> None:
        entry = tally.setdefault(kind, [0, 0.0])
        entry[0] += steps
        entry[1] += clock() - now["began"]

    def plan(original: Callable) -> Callable:
        def planned(self: Scheduler, method: Any, at: float) -> Any:
            now["began"] = clock()
            plan = original(self, method, at)
            now["kind"] = "prefill" if len(plan.prefill) else DECODE
            return plan
        return planned

    def close(original: Callable) -> Callable:
        def closed(self: Scheduler, plan: Any, at: float, method: Any) -> Any:
            finished, aborted = original(self, plan, at, method)
            if not now["stretch"]:
                count(now["kind"] + (", ends" if len(finished) or len(aborted) else ""), 1)
            return finished, aborted
        return closed

    def quiet(original: Callable) -> Callable:
        def stretch(self: EngineMethod, plan: Any) -> int:
            now["stretch"] = True
            try:
                steps = original(self, plan)
            finally:
                now["stretch"] = False
            if steps:
                count("quiet stretch", steps)
            return steps
        return stretch

    patched = [(Scheduler, "plan", plan), (Scheduler, "close_step", close)]
    patched += [(cls, "quiet_steps", quiet) for cls in _subclasses(EngineMethod)
                if "quiet_steps" in vars(cls)]
    originals = [(cls, name, vars(cls)[name]) for cls, name, _ in patched]
    for cls, name, wrap in patched:
        setattr(cls, name, wrap(vars(cls)[name]))
    try:
        yield
    finally:
        for cls, name, original in originals:
            setattr(cls, name, original)


def kinds_table(s: Scenario, repeats: int) -> list[str]:
    """The table for scenario `s`: the run with the lowest timed total of `repeats`."""
    simulate(s.replace(requests=8))   # modules imported on first use, untimed
    best: dict[str, list[float]] = {}
    for _ in range(repeats):
        tally: dict[str, list[float]] = {}
        with timed_steps(tally):
            simulate(s)
        if not best or sum(t for _, t in tally.values()) < sum(t for _, t in best.values()):
            best = tally
    steps = sum(n for n, _ in best.values())
    total = sum(t for _, t in best.values())
    engine = s.engine or "default engine"
    lines = [f"{s.method} ({engine}): {steps} steps, {total:.3f} s timed",
             f"  {'kind':<16}{'steps':>8}{'share':>8}{'us/step':>10}{'of time':>9}"]
    for kind, (n, t) in sorted(best.items(), key=lambda item: -item[1][1]):
        lines.append(f"  {kind:<16}{n:>8}{n / steps:>8.0%}{t / n * 1e6:>10.1f}{t / total:>9.0%}")
    plain = best.get(DECODE, [0, 0.0])[1]
    if plain and plain < total:
        faster = total / (total - plain)
        lines.append(f"  bound: with every plain decode step free, the loop {faster:.2f}x faster")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default="psd,sd,ar")
    parser.add_argument("--engine", choices=("roofline", "default"), default="roofline",
                        help="price by the roofline (as benchmarks/speed_vs.py does) or the default engine")
    parser.add_argument("--repeats", type=int, default=3)
    add_record_flag(parser)
    args = parser.parse_args()
    pinned = {"engine": "roofline"} if args.engine == "roofline" else {}
    lines: list[str] = []
    for method in args.methods.split(","):
        for line in kinds_table(Scenario(method=method, **pinned), args.repeats):
            print(line, flush=True)
            lines.append(line)
    if args.record:
        notes = ("The default scenario, each step timed from its plan to its close (perf_counter), "
                 f"the run with the lowest timed total of {args.repeats}; `share` of the steps, "
                 "`of time` of the timed time. The bound: the loop's speed-up if every plain decode "
                 "step (no request ending, no prompt) cost nothing, the most any shortcut for them "
                 "can give.")
        print(f"recorded: {write('step_kinds', 'Engine loop time by kind of step', lines, notes)}")


if __name__ == "__main__":
    main()
