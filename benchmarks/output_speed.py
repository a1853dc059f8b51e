"""Output speed: writing a run's steps.csv and requests.csv, column-wise (table_csv) against the
row-by-row csv.writer it replaced (the reference in tests/sim/test_csv_writer.py), on the default
scenario; the bytes are checked equal. The old writer took ~15 µs a row (docs/measurements/).

    python benchmarks/output_speed.py [--requests N] [--repeats N] [--record]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from recording import ROOT, add_record_flag, write

from psdsim.sim.output.csv_table import table_csv
from psdsim.sim.run import simulate
from psdsim.sim.scenario import load_scenario

sys.path.insert(0, str(ROOT))
from tests.helpers.scenarios import reference_csv


def _median_s(fn, repeats: int) -> float:
    walls = []
    for _ in range(repeats):
        began = time.perf_counter()
        fn()
        walls.append(time.perf_counter() - began)
    return statistics.median(walls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    add_record_flag(parser)
    args = parser.parse_args()
    result = simulate(load_scenario(overrides=[f"requests={args.requests}"]))
    lines = [f"{'table':<14}{'rows':>8}{'cols':>6}{'old µs/row':>12}{'new µs/row':>12}{'speed-up':>10}"
             "  bytes"]
    for name, table in (("steps.csv", result.steps), ("requests.csv", result.requests)):
        rows = len(next(iter(table.values())))
        same = "equal" if table_csv(table) == reference_csv(table) else "DIFFER"
        old = _median_s(lambda table=table: reference_csv(table), args.repeats)
        new = _median_s(lambda table=table: table_csv(table), args.repeats)
        lines.append(f"{name:<14}{rows:>8}{len(table):>6}{old / rows * 1e6:>12.1f}{new / rows * 1e6:>12.1f}"
                     f"{old / new:>9.1f}×  {same}")
    lines.append(f"\ndefault scenario with {args.requests} requests, median of {args.repeats}")
    print("\n".join(lines))
    if args.record:
        write("output_speed", "Writing steps.csv and requests.csv", lines)


if __name__ == "__main__":
    main()
