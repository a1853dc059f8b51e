"""The calibration round trip: simulate with the analytic model, export every cost query as a noisy
Nsight Systems export, calibrate it, and simulate again with the fitted profile.

Prints the fit report and the two runs' figures side by side. Everything is seeded.

    python benchmarks/calibration_roundtrip.py [--set requests=300] [--noise 0.02] [--outliers 0.01]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from psdsim.calibration.calibrate import calibrate
from psdsim.calibration.report import report_lines
from psdsim.calibration.synthetic import CostLog, write_cost_trace
from psdsim.sim.costs import AnalyticCost
from psdsim.sim.output.results import write_file
from psdsim.sim.run import simulate
from psdsim.sim.scenario import catalog_for, load_scenario

KEYS = ("throughput_tok_s", "output_tok_s", "makespan_s", "e2el_ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", dest="overrides", action="append", default=None, metavar="FIELD=VALUE",
                        help="scenario overrides (default: requests=300)")
    parser.add_argument("--noise", type=float, default=0.02, help="relative timing noise (default 0.02)")
    parser.add_argument("--outliers", type=float, default=0.01, help="share of stalled work (default 0.01)")
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
        print("\n".join(report_lines(cal)))
        write_file(profile, cal.profile.to_json())
        fitted = simulate(s.replace(profile=str(profile))).summary
    print(f"\n{'':<20}{'analytic':>12}{'fitted':>12}{'error':>9}")
    for key in KEYS:
        a, b = truth[key], fitted[key]
        print(f"{key:<20}{a:>12.2f}{b:>12.2f}{(b - a) / a:>+9.2%}")


if __name__ == "__main__":
    main()
