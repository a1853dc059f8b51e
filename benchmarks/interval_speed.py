"""How long --intervals takes: N draws of the default scenario, and the example plan's draws.

    python benchmarks/interval_speed.py [--draws 32] [--workers 2] [--plan 16]

The target is 32 draws of the default scenario (psd, 1000 requests) in under 10 s of wall time on
the project's 2-core machine, and `psdsim plan examples/plan.toml --intervals 16` in under two
minutes (`--plan N` times that too; 0 skips it). The load average is printed beside the times:
the machine is shared, and a draw is a whole simulation, so the wall time is the CPUs' to give.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from psdsim.sim.scenario import Scenario
from psdsim.studies.intervals import propagate

ROOT = Path(__file__).resolve().parents[1]


def timed_draws(draws: int, workers: int) -> tuple[float, float]:
    """Wall and CPU seconds (this process and its workers) of `draws` draws."""
    began, cpu = time.perf_counter(), _cpu()
    propagate(Scenario(), draws, workers=workers)
    return time.perf_counter() - began, _cpu() - cpu


def timed_plan(draws: int, workers: int) -> float:
    from psdsim.studies.plan import load_plan
    from psdsim.studies.plan_intervals import plan_draws
    from psdsim.studies.plan_verdict import run_plan

    began = time.perf_counter()
    spec = load_plan(ROOT / "examples" / "plan.toml")
    result = run_plan(spec, workers)
    plan_draws(spec, result.configs, draws, workers)
    return time.perf_counter() - began


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=32)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--plan", type=int, default=16, help="draws of examples/plan.toml (0: skip)")
    args = ap.parse_args()
    load = os.getloadavg()[0]
    wall, cpu = timed_draws(args.draws, args.workers)
    print(f"{args.draws} draws of the default scenario on {args.workers} workers: {wall:.1f} s wall, "
          f"{cpu:.1f} s CPU ({cpu / args.draws:.2f} s a draw); load average {load:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after, {os.cpu_count()} CPUs")
    if args.plan:
        load = os.getloadavg()[0]
        print(f"plan examples/plan.toml with {args.plan} draws: {timed_plan(args.plan, args.workers):.1f} s "
              f"wall (the plan itself included); load average {load:.1f} before, "
              f"{os.getloadavg()[0]:.1f} after")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
