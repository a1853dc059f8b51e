"""The calibration round trip: simulate with the analytic model, export every cost query as a noisy
Nsight Systems export, calibrate it, and simulate again with the fitted profile.

Prints the fit report and the two runs' figures side by side. Everything is seeded.

    python benchmarks/calibration_roundtrip.py [--set requests=300] [--noise 0.02] [--outliers 0.01]
                                               [--record]

`--record` also writes the output to docs/measurements/calibration_roundtrip.md with date, commit
and machine.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from recording import add_record_flag, write

from psdsim.calibration.calibrate import calibrate
from psdsim.calibration.report import report_lines
from psdsim.calibration.synthetic import CostLog, write_cost_trace
from psdsim.sim.costs import AnalyticCost
from psdsim.sim.output.atomic_writes import write_file
from psdsim.sim.run import simulate
from psdsim.sim.scenario import catalog_for, load_scenario

KEYS = ("throughput_tok_s", "output_tok_s", "makespan_s", "e2el_ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", dest="overrides", action="append", default=None, metavar="FIELD=VALUE",
                        help="scenario overrides (default: requests=300)")
    parser.add_argument("--noise", type=float, default=0.02, help="relative timing noise (default 0.02)")
    parser.add_argument("--outliers", type=float, default=0.01, help="share of stalled work (default 0.01)")
    add_record_flag(parser)
    args = parser.parse_args()
    overrides = args.overrides if args.overrides is not None else ["requests=300"]
    s = load_scenario(overrides=overrides)
    log = CostLog(AnalyticCost(s, catalog_for(s)))
    truth = simulate(s, cost=log).summary
    with tempfile.TemporaryDirectory() as tmp:
        trace, profile = Path(tmp) / "run.sqlite", Path(tmp) / "profile.json"
        write_cost_trace(log.calls, trace, rng=np.random.default_rng(s.seed), noise=args.noise,
                         outliers=args.outliers)
        cal = calibrate([trace], source={"engine": "psdsim (analytic)", "gpu": s.gpu})
        lines = report_lines(cal)
        print("\n".join(lines))
        write_file(profile, cal.profile.to_json())
        fitted = simulate(s.replace(profile=str(profile))).summary
    lines += ["", f"{'':<20}{'analytic':>12}{'fitted':>12}{'error':>9}"]
    for key in KEYS:
        a, b = truth[key], fitted[key]
        lines.append(f"{key:<20}{a:>12.2f}{b:>12.2f}{(b - a) / a:>+9.2%}")
    print("\n".join(lines[-len(KEYS) - 2:]))
    if args.record:
        notes = (f"Scenario overrides {overrides}; timing noise {args.noise:.0%}, stalled work "
                 f"{args.outliers:.0%} (calibration/synthetic.py: 4 TP ranks).")
        print(f"recorded: {write('calibration_roundtrip', 'Calibration round trip', lines, notes)}")


if __name__ == "__main__":
    main()
