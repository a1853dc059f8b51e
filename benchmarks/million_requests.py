"""A capacity-planning run of 1,000,000 requests in bounded memory, beside 10,000 and
100,000 to show how memory grows with requests.

Each size runs the default scenario (`psdsim run`'s: Setting 2, PSD, ShareGPT-like prompts, 256
output tokens, offline) with `requests` set, in a fresh process: simulate, then write its results
folder (summary.json, steps.csv, requests.csv) into a temporary folder, as `psdsim run` does.
Prints, per size: engine steps, simulation and writing wall time, peak RSS (ru_maxrss, the whole
process: interpreter and imports included), the peak above what the process held before
simulating, that per request, whether the step table was spilled to disk (sim/spill.py), and
sim/footprint.py's estimate (which must be at or above the measured peak).

    python benchmarks/million_requests.py [--requests 10000,100000,1000000] [--set FIELD=VALUE ...]
                                          [--no-write] [--record]

The 1M run takes ~30-60 min on a shared 2-core machine; `--requests 10000,100000` takes ~4 min.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

from recording import ROOT, Lines, add_record_flag, write

# This checkout's code, whichever is installed (a run of an hour is best measured in a git
# worktree of one commit, untouched by edits meanwhile): its sim/ is psdsim.sim, as installed.
IMPORT_THIS_TREE = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
import psdsim
psdsim.__path__.append({str(ROOT)!r})
"""
exec(IMPORT_THIS_TREE)
from psdsim.sim.footprint import estimate_bytes  # noqa: E402
from psdsim.sim.scenario import load_scenario  # noqa: E402

CHILD = IMPORT_THIS_TREE + """
import json, resource, shutil, sys, tempfile, time
from pathlib import Path
from psdsim.sim import records
from psdsim.sim.output.results import write_result
from psdsim.sim.run import simulate
from psdsim.sim.scenario import load_scenario

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

write = sys.argv[1] == "write"
if sys.argv[2] != "default":
    records.SPILL_ROWS = int(sys.argv[2])
s = load_scenario(overrides=sys.argv[3:])
simulate(s.replace(requests=8))   # imports and first-use caches, so that `before` holds them
before = peak()
last = [-1]
def progress(f):
    if int(f * 10) > last[0]:
        last[0] = int(f * 10)
        when = time.strftime('%H:%M:%S')
        print(f"  {s.requests:,} requests: {f:.0%} ({when})", file=sys.stderr, flush=True)
began = time.perf_counter()
r = simulate(s, progress=progress)
sim_s = time.perf_counter() - began
sim_peak = peak()
out = {"steps": len(r.steps["kind"]), "sim_s": sim_s, "before": before, "sim_peak": sim_peak,
       "spilled": isinstance(r.steps["kind"].base, memoryview), "throughput": r.summary["throughput_tok_s"]}
if write:
    folder = Path(tempfile.mkdtemp(prefix="psdsim-bench-"))
    try:
        began = time.perf_counter()
        write_result(r, folder / "run")
        out["write_s"] = time.perf_counter() - began
        out["csv_mb"] = sum(p.stat().st_size for p in (folder / "run").glob("*.csv")) / 1e6
    finally:
        shutil.rmtree(folder)
out["peak"] = peak()
print(json.dumps(out))
"""


def _measure(requests: int, sets: list[str], write_files: bool, spill_rows: int | None) -> dict:
    overrides = [*sets, f"requests={requests}"]
    spill = "default" if spill_rows is None else str(spill_rows)
    proc = subprocess.run([sys.executable, "-c", CHILD, "write" if write_files else "no", spill, *overrides],
                          stdout=subprocess.PIPE, text=True, check=True)
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["estimate"] = estimate_bytes(load_scenario(overrides=overrides))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", default="10000,100000,1000000",
                        help="comma-separated request counts, each run in a fresh process")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="a scenario override for every run (default: the default scenario)")
    parser.add_argument("--no-write", action="store_true", help="simulate only; write no results folder")
    parser.add_argument("--spill-rows", type=int,
                        help="spill the step table past this many rows (default: sim/records.SPILL_ROWS)")
    add_record_flag(parser)
    args = parser.parse_args()
    print_ = Lines()
    scenario = " ".join(f"--set {x}" for x in args.set) or "the default scenario"
    print_(f"psdsim run of {scenario} (PSD, 256 output tokens unless set), one fresh process per size")
    if args.spill_rows is not None:
        print_(f"step tables spilled past {args.spill_rows:,} rows")
    print_(f"{'requests':>10}{'steps':>11}{'sim s':>8}{'write s':>9}{'CSV MB':>8}{'peak MB':>9}"
           f"{'sim MB':>8}{'above MB':>10}{'B/request':>11}{'spilled':>9}{'estimate MB':>13}")
    for n in (int(x) for x in args.requests.split(",")):
        m = _measure(n, args.set, not args.no_write, args.spill_rows)
        above = m["peak"] - m["before"]
        print_(f"{n:>10,}{m['steps']:>11,}{m['sim_s']:>8.0f}{m.get('write_s', 0):>9.0f}"
               f"{m.get('csv_mb', 0):>8.0f}{m['peak'] / 1e6:>9.0f}{(m['sim_peak'] - m['before']) / 1e6:>8.0f}"
               f"{above / 1e6:>10.0f}{above / n:>11,.0f}{'yes' if m['spilled'] else 'no':>9}"
               f"{m['estimate'] / 1e6:>13.0f}")
    print_("peak MB: ru_maxrss of the run's process, imports included; sim MB: its peak above what it "
           "held before simulating, through simulate() (summary included); above MB: the same through "
           "writing the results folder; B/request: above MB per request")
    if args.record:
        write("million_requests", "A 1M-request run in bounded memory", print_,
              notes="Run with `nice -n 10` on a 2-core machine shared with other jobs: wall times "
                    "are loose; memory figures are not affected by the load.")


if __name__ == "__main__":
    main()
