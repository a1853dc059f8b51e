"""What pricing costs per step under the engine execution model: the StepCost calls the
default `psdsim run` scenario makes, recorded once, replayed on this checkout's EngineCost, on the
roofline (AnalyticCost, for the calls it has) and optionally on sim/execution.py of another commit.

Why a replay: a whole run is ~50 us a step on this machine, so a few us of pricing drown in a noisy
machine's run-to-run spread; replaying the same calls isolates them. Rounds are interleaved, the
best of each call kind and the median per-round ratio are reported, and the replayed results must
be identical. The per-kind table replays each kind's calls together, so there `verify_parts` is
priced afresh (in a run it reuses the parts of the `verify` just before it); the totals replay the
run's order.

The replay runs the calls back to back, with warm caches; inside a run they cost about twice as
much (2026-12-01, this script: all priced calls 7.4 us a step inside a run, 3.9 replayed; the
roofline 3.3 and 1.7). So the script also times every priced call where a real run makes it
(perf_counter_ns around each call, the timer's own cost, measured on a no-op call, taken off), for
this checkout's engine and the roofline: that is what richer costs add to a step;
the replay stays the A/B tool for a change.

    python benchmarks/engine_cost_calls.py                     # engine vs roofline, us per step
    python benchmarks/engine_cost_calls.py --against HEAD~2    # and before/after a change
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from psdsim.sim import execution
from psdsim.sim.costs import AnalyticCost
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario, catalog_for, validate

ROOT = Path(__file__).resolve().parents[1]
CALLS = ("draft", "verify", "verify_parts", "draft_chunks", "comm", "broadcast", "reject", "swap",
         "framework", "driver_prep")


class _Watched:
    """Passes every attribute through to the cost; a priced call (CALLS) goes through
    `watch(name, fn)`, which returns the callable to run instead (logging or timing it)."""

    def __init__(self, inner: Any, watch: Callable[[str, Any], Any]) -> None:
        self.__dict__.update(_inner=inner, _watch=watch)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        return self._watch(name, value) if name in CALLS else value


def _logging(log: list[tuple[str, tuple]]) -> Callable[[str, Any], Any]:
    """Watch that logs each priced call and its arguments."""
    def watch(name: str, fn: Any) -> Any:
        def logged(*args: Any) -> Any:
            log.append((name, args))
            return fn(*args)
        return logged
    return watch


def _timed(fn: Any, tally: list[int]) -> Any:
    def timed(*args: Any) -> Any:
        began = time.perf_counter_ns()
        out = fn(*args)
        tally[0] += time.perf_counter_ns() - began
        tally[1] += 1
        return out
    return timed


def _in_run(s: Scenario, cost: Any, steps: int) -> dict[str, float]:
    """Microseconds per step each priced call kind takes inside a whole run of `s` (the timer's
    own cost per call, measured on a no-op, taken off)."""
    spent: dict[str, list[int]] = {}
    simulate(s, cost=_Watched(cost, lambda name, fn: _timed(fn, spent.setdefault(name, [0, 0]))))
    probe = [0, 0]
    noop = _timed(lambda: None, probe)
    for _ in range(100_000):
        noop()
    overhead = probe[0] / probe[1]
    return {name: (ns - calls * overhead) / steps / 1e3 for name, (ns, calls) in spent.items()}


def _execution_at(commit: str) -> Any:
    """sim/execution.py as of `commit`, imported beside this checkout's (same psdsim package)."""
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:sim/execution.py"], check=True,
                          capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "execution_then.py"
    path.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("execution_then", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _in_order(cost: Any, calls: list[tuple[str, tuple]]) -> tuple[float, list[Any]]:
    """Seconds of every call in the run's order (the roofline lacks some: skipped) and the results."""
    bound = [(fn, a) for fn, a in ((getattr(cost, n, None), a) for n, a in calls) if fn is not None]
    began = time.perf_counter()
    results = [fn(*a) for fn, a in bound]
    return time.perf_counter() - began, results


def _by_kind(cost: Any, calls: list[tuple[str, tuple]]) -> dict[str, float]:
    """Seconds per call kind, each kind's calls replayed together."""
    spent: dict[str, float] = {}
    for name in CALLS:
        fn = getattr(cost, name, None)
        args = [a for n, a in calls if n == name]
        if fn is None or not args:
            continue
        began = time.perf_counter()
        for a in args:
            fn(*a)
        spent[name] = time.perf_counter() - began
    return spent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", help="also replay on sim/execution.py of this commit")
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    s = validate(Scenario())
    cat = catalog_for(s)
    calls: list[tuple[str, tuple]] = []
    simulate(s, cost=_Watched(execution.step_cost(s, cat), _logging(calls)))
    steps = sum(1 for n, _ in calls if n == "verify")
    print(f"default scenario, engine {s.engine_key}: {len(calls)} cost calls over {steps} target passes")
    began = time.perf_counter()
    simulate(s)
    print(f"one whole run for scale: {(time.perf_counter() - began) / steps * 1e6:.0f} us per target pass")
    costs = {"now": lambda: execution.step_cost(s, cat), "roofline": lambda: AnalyticCost(s, cat)}
    if args.against:
        then = _execution_at(args.against)
        costs[args.against] = lambda: then.step_cost(s, cat)
    best: dict[str, dict[str, float]] = {label: {} for label in costs}
    totals: dict[str, list[float]] = {label: [] for label in costs}
    results: dict[str, list[Any]] = {}
    labels = list(costs)
    for r in range(args.rounds):
        for label in labels if r % 2 == 0 else labels[::-1]:
            total, results[label] = _in_order(costs[label](), calls)
            totals[label].append(total)
            for name, sec in _by_kind(costs[label](), calls).items():
                best[label][name] = min(best[label].get(name, sec), sec)
    print(f"{'us per step':14s}" + "".join(f"{label:>12s}" for label in labels))
    for name in CALLS:
        row = [best[label].get(name) for label in labels]
        print(f"{name:14s}" + "".join(f"{x / steps * 1e6:12.2f}" if x is not None else f"{'-':>12s}"
                                      for x in row))
    for label in labels:
        print(f"{label}: all calls in the run's order {statistics.median(totals[label]) / steps * 1e6:.2f} us"
              " per step (median round)")
    inside = {"now": _in_run(s, execution.step_cost(s, cat), steps),
              "roofline": _in_run(s, AnalyticCost(s, cat), steps)}
    print(f"{'inside a run, us per step':25s}" + "".join(f"{label:>12s}" for label in inside))
    for name in CALLS:
        cells = (f"{v[name]:12.2f}" if name in v else f"{'-':>12s}" for v in inside.values())
        print(f"{name:25s}" + "".join(cells))
    print("inside a run, all priced calls: " + ", ".join(f"{label} {sum(v.values()):.2f} us per step"
                                                        for label, v in inside.items()))
    if args.against:
        ratio = statistics.median(n / t for n, t in zip(totals["now"], totals[args.against], strict=True))
        same = results["now"] == results[args.against]
        print(f"now / {args.against}: median per-round ratio {ratio:.3f}; results identical: {same}")


if __name__ == "__main__":
    main()
