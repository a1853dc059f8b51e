"""Write examples/sample-trace.sqlite, the trace the README's tour calibrates on.

    python examples/sample_trace.py [PATH]     # default: examples/sample-trace.sqlite

A fresh clone has no GPU trace of its own, so the tour uses a synthetic one: a small PSD run of the
default scenario priced by the analytic cost model, every cost query laid out as an Nsight Systems
export (calibration/synthetic.py, the calibration round trip's writer) with 2% timing noise and 1%
of the work stalled, as measurements have. `psdsim calibrate` fits it like a real export, but what
it recovers is the analytic model's GPU work (no engine CPU side), on a run too small to cover the
default scenario's batches and contexts: it shows the loop, not a machine. Seeded: the same file
every time.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from psdsim.calibration.synthetic import CostLog, write_cost_trace
from psdsim.sim.costs import AnalyticCost
from psdsim.sim.run import simulate
from psdsim.sim.scenario import catalog_for, load_scenario

SAMPLE = Path(__file__).resolve().with_name("sample-trace.sqlite")
RUN = ["requests=40", "output_len=24"]   # small enough to ship (about 300 KB), large enough to fit


def write_sample(path: Path) -> Path:
    """Simulate the small run, log its cost queries, and write them as an nsys export at `path`."""
    s = load_scenario(overrides=RUN)
    log = CostLog(AnalyticCost(s, catalog_for(s)))
    simulate(s, cost=log)
    path.unlink(missing_ok=True)   # the writer opens an existing database: start from none
    write_cost_trace(log.calls, path, rng=np.random.default_rng(s.seed), noise=0.02, outliers=0.01)
    return path


if __name__ == "__main__":
    print(write_sample(Path(sys.argv[1]) if len(sys.argv) > 1 else SAMPLE))
