"""Memory a run keeps, per request and per engine step: the figures behind sim/footprint.py.

Runs the default scenario (AR and PSD, two sizes each) in fresh processes, takes each one's peak
RSS above what the process held before simulating, and fits bytes = a × requests + b × steps
(least squares). Prints a and b beside BYTES_PER_REQUEST and BYTES_PER_STEP, and the estimate
against the measured peak for each run (the estimate should be at or above it).

    python benchmarks/memory_footprint.py [--sizes 1000,4000] [--big 100000] [--record]

--big N adds one PSD run of N requests (a capacity-planning size). Since a long run's step table
spills to temporary disk past records.SPILL_ROWS steps, a step costs memory only up to that bound:
100,000 requests peaked 58 MB above start (docs/measurements/million_requests.md, 1 M: 388 MB).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import numpy as np
from recording import add_record_flag, write

from psdsim.sim.footprint import BYTES_PER_REQUEST, BYTES_PER_STEP, estimate_bytes
from psdsim.sim.scenario import load_scenario

CHILD = """
import json, resource, sys
from psdsim.sim.run import simulate
from psdsim.sim.scenario import load_scenario
s = load_scenario(overrides=sys.argv[1:])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
r = simulate(s)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"bytes": (peak - before) * 1024, "steps": len(r.steps["kind"])}))
"""


def _measure(overrides: list[str]) -> tuple[dict, int]:
    """One run in a fresh process: its peak bytes and steps, and the estimate for it."""
    out = subprocess.run([sys.executable, "-c", CHILD, *overrides], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout), estimate_bytes(load_scenario(overrides=overrides))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,4000")
    parser.add_argument("--big", type=int, help="also one PSD run of this many requests (not in the fit)")
    add_record_flag(parser)
    args = parser.parse_args()
    runs = [(method, size, *_measure([f"requests={size}", f"method={method}"]))
            for method in ("ar", "psd") for size in (int(x) for x in args.sizes.split(","))]
    fitted = list(runs)
    if args.big:
        runs.append(("psd", args.big, *_measure([f"requests={args.big}", "method=psd"])))
    a, b = np.linalg.lstsq(np.array([[size, m["steps"]] for _, size, m, _ in fitted], dtype=float),
                           np.array([m["bytes"] for _, _, m, _ in fitted], dtype=float), rcond=None)[0]
    lines = [f"{'run':<16}{'steps':>9}{'peak MB':>10}{'estimate MB':>13}{'estimate/peak':>15}"]
    lines += [f"{method + ' ' + str(size):<16}{m['steps']:>9}{m['bytes'] / 1e6:>10.1f}{est / 1e6:>13.1f}"
              f"{est / max(m['bytes'], 1):>15.2f}" for method, size, m, est in runs]
    lines.append(f"\nfit: {a:,.0f} bytes per request (BYTES_PER_REQUEST = {BYTES_PER_REQUEST}), "
                 f"{b:,.0f} bytes per step (BYTES_PER_STEP = {BYTES_PER_STEP})")
    print("\n".join(lines))
    if args.record:
        write("memory_footprint", "Memory a run keeps per request and per step", lines)


if __name__ == "__main__":
    main()
