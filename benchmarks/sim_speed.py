"""Simulator speed: simulated seconds per wall second, and engine steps per wall second.

Runs the default scenario (1000 requests) and the same with 10x the requests, for each method,
several times, and prints the median wall time. Targets, on a 2-core machine: the
default scenario in under 2 s of wall time; at least 1000x faster than real time.

    python benchmarks/sim_speed.py [--repeats N] [--methods psd,sd,ar] [--record]
    python benchmarks/sim_speed.py --against REV [--repeats N] [--methods ...] [--engine default] [--record]

`--record` also writes the table to docs/measurements/sim_speed.md with date, commit and machine.
`--against REV` times this checkout and commit REV side by side instead, interleaved, and prints
the ratios (benchmarks/speed_vs.py; recorded to docs/measurements/speed_vs.md).
"""

from __future__ import annotations

import argparse
import statistics
import time

import speed_vs
from recording import add_record_flag, write

from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario


def measure(s: Scenario, repeats: int) -> tuple[float, dict]:
    walls = []
    summary: dict = {}
    for _ in range(repeats):
        began = time.perf_counter()
        summary = simulate(s).summary
        walls.append(time.perf_counter() - began)
    return statistics.median(walls), summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--methods", default="psd,sd,ar")
    parser.add_argument("--against", metavar="REV", help="compare with commit REV side by side")
    parser.add_argument("--engine", choices=("roofline", "default"), default="roofline",
                        help="with --against: both trees roofline-priced, or each one's default engine")
    add_record_flag(parser)
    args = parser.parse_args()
    if args.against:
        speed_vs.compare_and_record(args.against, args.methods.split(","), args.repeats, args.record,
                                    args.engine)
        return
    lines = [f"{'scenario':<24}{'wall s':>9}{'sim s':>10}{'sim s/wall s':>14}"
             f"{'steps':>8}{'steps/wall s':>14}"]
    print(lines[0])
    for method in args.methods.split(","):
        for scale in (1, 10):
            s = Scenario(method=method, requests=1000 * scale)
            wall, summ = measure(s, args.repeats if scale == 1 else 1)
            steps = summ["decode_steps"] + summ["prefill_steps"]
            label = f"default {method} x{scale}"
            lines.append(f"{label:<24}{wall:>9.3f}{summ['makespan_s']:>10.1f}"
                         f"{summ['makespan_s'] / wall:>14.0f}{steps:>8}{steps / wall:>14.0f}")
            print(lines[-1], flush=True)
    if args.record:
        notes = (f"Median wall time of `simulate()` over {args.repeats} runs (×10 requests: one run), "
                 "the KV block manager and scheduler emulation on; `sim s` is the simulated makespan.")
        print(f"recorded: {write('sim_speed', 'Simulator speed', lines, notes)}")


if __name__ == "__main__":
    main()
