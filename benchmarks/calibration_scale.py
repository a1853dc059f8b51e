"""Reading large Nsight Systems exports: time and peak memory of `read_nsys` against trace size.

For each size, a synthetic export with that many kernel rows (10 000 ranges) is written, then read
in a fresh subprocess that reports its wall time and peak RSS (VmHWM). Beside it, in the same way,
a naive reader that fetches every kernel row into a Python list: the memory a non-streaming
reader would need. Ratios are measured side by side in one run.

    python benchmarks/calibration_scale.py [--sizes 250000,1000000,2000000] [--record]

`--record` also writes the table to docs/measurements/calibration_scale.md with date, commit and
machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from recording import Lines, add_record_flag, write

from psdsim.calibration.synthetic import write_bulk_trace

RANGES = 10_000

READ = """
import json, sys, time
from psdsim.calibration.nsys import read_nsys
from psdsim.calibration.ranges import PRESETS
t = time.perf_counter()
built, _ = read_nsys(sys.argv[1], PRESETS["psdsim"])
wall = time.perf_counter() - t
print(json.dumps({"wall_s": wall, "samples": len(built.samples), "rss_mb": peak_mb()}))
"""
NAIVE = """
import json, sqlite3, sys, time
t = time.perf_counter()
rows = sqlite3.connect(sys.argv[1]).execute(
    'SELECT start, "end", deviceId, correlationId, globalPid, shortName FROM CUPTI_ACTIVITY_KIND_KERNEL'
).fetchall()
wall = time.perf_counter() - t
print(json.dumps({"wall_s": wall, "samples": len(rows), "rss_mb": peak_mb()}))
"""
PEAK = """
def peak_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
"""


def run(code: str, path: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", PEAK + code, str(path)], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="250000,1000000,2000000", help="kernel rows per trace")
    add_record_flag(parser)
    args = parser.parse_args()
    out = Lines()
    base = run("print(__import__('json').dumps({'rss_mb': peak_mb()}))", Path("."))["rss_mb"]
    out(f"python interpreter alone: {base:.0f} MB peak RSS")
    out(f"{'kernel rows':>12} {'file MB':>8} {'write s':>8} {'read s':>7} {'rows/s':>9} "
          f"{'read RSS MB':>11} {'naive RSS MB':>12} {'naive/read':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        for size in (int(x) for x in args.sizes.split(",")):
            path = Path(tmp) / f"bulk{size}.sqlite"
            began = time.perf_counter()
            write_bulk_trace(path, RANGES, size // RANGES)
            wrote = time.perf_counter() - began
            read, naive = run(READ, path), run(NAIVE, path)
            out(f"{size:>12,} {path.stat().st_size / 1e6:>8.0f} {wrote:>8.1f} {read['wall_s']:>7.1f} "
                  f"{size / read['wall_s']:>9,.0f} {read['rss_mb']:>11.0f} {naive['rss_mb']:>12.0f} "
                  f"{naive['rss_mb'] / read['rss_mb']:>10.2f}")
            path.unlink()

    if args.record:
        notes = (f"Synthetic exports with {RANGES:,} ranges, each read in a fresh process (peak RSS from "
                 "VmHWM) beside a naive reader that fetches every kernel row into a list.")
        print(f"recorded: {write('calibration_scale', 'Reading large Nsight Systems exports', out, notes)}")


if __name__ == "__main__":
    main()
