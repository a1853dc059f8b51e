"""Adaptive draft length against the best fixed k: throughput of k_policy = adaptive (k' in 0..K per
drafting) beside every fixed k in 1..K and AR, at low, middling and high acceptance.

The default models and GPUs, 200 requests of 64 output tokens; decode throughput (the paper's
definition). Adaptive is not told which k is best; at low acceptance it should stop drafting and
land on AR, elsewhere near the best fixed k (tests/sim/test_methods.py asserts 2-3%).

    python benchmarks/adaptive_k.py [--k-max 6] [--acceptance 0.1,0.6,0.9] [--record]

`--record` also writes the table to docs/measurements/adaptive_k.md with date, commit and machine.
"""

from __future__ import annotations

import argparse

from recording import Lines, add_record_flag, write

from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario

BASE = Scenario(requests=200, output_len=64)


def throughput(s: Scenario) -> float:
    return float(simulate(s).summary["throughput_tok_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k-max", type=int, default=6)
    parser.add_argument("--acceptance", default="0.1,0.6,0.9")
    add_record_flag(parser)
    args = parser.parse_args()
    out = Lines()
    ar = throughput(BASE.replace(method="ar"))
    out(f"{'method':<8}{'acceptance':>11}{'adaptive tok/s':>16}{'best fixed k':>14}{'its tok/s':>11}"
        f"{'adaptive/best':>15}{'AR tok/s':>10}")
    for method in ("sd", "psd"):
        for acceptance in (float(a) for a in args.acceptance.split(",")):
            s = BASE.replace(method=method, acceptance=acceptance)
            fixed = {k: throughput(s.replace(k=k)) for k in range(1, args.k_max + 1)}
            best = max(fixed, key=fixed.__getitem__)
            adaptive = throughput(s.replace(k=args.k_max, k_policy="adaptive"))
            out(f"{method:<8}{acceptance:>11.2f}{adaptive:>16.1f}{best:>14}{fixed[best]:>11.1f}"
                f"{adaptive / fixed[best]:>15.3f}{ar:>10.1f}")
    if args.record:
        notes = (f"{BASE.requests} requests x {BASE.output_len} tokens of the default scenario; adaptive "
                 f"drafts k' in 0..{args.k_max}; fixed k in 1..{args.k_max}; decode throughput.")
        path = write("adaptive_k", "Adaptive draft length against the best fixed k", out, notes)
        print(f"recorded: {path}")


if __name__ == "__main__":
    main()
