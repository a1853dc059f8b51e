"""`psdsim sweep SPEC.toml --out DIR`: argument parsing and reporting for studies/sweep.py."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from psdsim.commands.common import (
    Progress,
    Work,
    check_workers,
    guarded_write,
    interrupted_exit,
    study_out,
    user_error,
    workers_used,
)
from psdsim.sim.numbers import integer

HELP = "run a grid or sampled design of scenarios into one table (parallel, resumable)"
EXIT_ALL_FAILED = 1
# What one run adds to a sweep folder: its runs/ID.json (~2 KB, a 4 KB block on disk), its
# results.csv row (~1.3 KB) and its share of results.parquet, rounded up.
BYTES_PER_RUN = 8192
# A dry run of a design up to this size builds and checks each point (a few seconds); a larger
# one is counted, its grid values checked, and its points are checked when the sweep starts.
DRY_RUN_POINTS = 10_000


def add_arguments(sw: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    from psdsim.commands.intervals import add_intervals_arg
    from psdsim.studies.executors import EXECUTORS

    sw.add_argument("spec", type=Path, metavar="SPEC.toml",
                    help="[base] scenario fields, [grid] field = [values], [sample] random/LHS design")
    sw.add_argument("--out", type=Path, help="sweep folder (default: results/sweep-SPEC, or results/sweep "
                                             "for sweep.toml); run the same command again to resume")
    sw.add_argument("--workers", type=integer, default=os.cpu_count() or 1,
                    help="processes (or Ray CPUs) to run on (default: all cores; 1 = serial)")
    sw.add_argument("--executor", choices=EXECUTORS, default="local",
                    help="local process pool (default), or ray (pip install 'psdsim[ray]')")
    sw.add_argument("--ray-address", metavar="ADDR",
                    help="join this Ray cluster (default: start a local Ray instance)")
    sw.add_argument("--force", action="store_true",
                    help="reuse an --out DIR that holds another sweep (runs of unchanged scenarios kept)")
    sw.add_argument("--retry-errors", action="store_true", help="run again the runs that raised an error")
    sw.add_argument("--metric", default="throughput_tok_s",
                    help="metric of the (k, m) heat map (default: throughput_tok_s)")
    sw.add_argument("--no-figures", action="store_true", help="skip the figures")
    sw.add_argument("--dry-run", action="store_true",
                    help="expand and validate the design, print its size, run nothing")
    sw.add_argument("--json", action="store_true", help="print a JSON summary only")
    add_intervals_arg(sw)


def _work(design: Any, workers: int, out: Path, draws: int | None) -> Work:
    """What running every run of the design takes: host time over the runs that go at once (each
    run's --intervals draws go after it, in its worker), and the folder's files (sim/footprint.py
    prices each run)."""
    from psdsim.sim.footprint import seconds_estimate

    runs = len(design.runs)
    seconds = sum(seconds_estimate(p.scenario) for p in design.runs) / workers_used(workers, runs)
    return Work(f"{runs:,} runs{_drawn(draws)}", seconds * (1 + (draws or 0)), runs * BYTES_PER_RUN,
                str(out))


def _drawn(draws: int | None) -> str:
    """What --intervals adds to each run, in words ("" without it)."""
    return f" × (1 + {draws:,} draws)" if draws else ""


def _figures(out: Path, rows: list[dict[str, Any]], swept: list[str], metric: str) -> list[Path]:
    from psdsim.sim.output.atomic_writes import write_file
    from psdsim.sim.output.overwrite_guard import remove_own_file
    from psdsim.studies.sweep import FIGURES, sweep_files
    from psdsim.studies.sweep_figures import sweep_figures

    folder = out / FIGURES
    for old in sweep_files(out):   # the last run's figures (only psdsim's: the sweep checked them)
        if old.parent == folder:
            remove_own_file(old)
    ok = [r for r in rows if r["status"] == "ok"]
    if ok and "k" in swept and "m" in swept and metric not in ok[0]:
        print(f"psdsim: warning: --metric {metric!r} is not a column of the results; no heat map "
              "(see the header of results.csv)", file=sys.stderr)
    figures = sweep_figures(rows, swept, metric)
    return [write_file(folder / name, data) for name, data in figures.items()]


def _dry_run(args: argparse.Namespace, design: Any, out: Path) -> None:
    """Count the design without building it; check every point too when that is quick (every
    grid value is checked already: load_design)."""
    every = design.size <= DRY_RUN_POINTS
    if every:
        design.points   # noqa: B018  (builds and validates each point)
    size = {"spec": str(args.spec), "points": design.size, "runs": design.distinct,
            **({"draws_per_run": args.intervals} if args.intervals else {}), "swept": design.swept,
            "out": str(out), "checked": "points" if every else "grid values"}
    if args.json:
        print(json.dumps(size, indent=2))
        return
    checked = "" if every else "; each grid value checked, each point when the sweep starts"
    print(f"psdsim sweep · {args.spec} · {design.size} design points, {design.distinct} distinct runs"
          f"{_drawn(args.intervals)} over {', '.join(design.swept) or 'nothing'} (dry run: nothing "
          f"written{checked})")


def run(args: argparse.Namespace) -> int:
    from psdsim.sim.footprint import check_results_disk
    from psdsim.sim.output.locks import output_lock
    from psdsim.sim.output.places import landing
    from psdsim.studies.executors import WorkerDied, require_ray
    from psdsim.studies.sweep import RUNS, run_sweep
    from psdsim.studies.sweep_design import load_design

    check_workers(args.workers)
    if args.ray_address and args.executor != "ray":
        raise user_error("--ray-address", "applies to the Ray executor only", "add --executor ray")
    if args.executor == "ray":
        require_ray()
    real = None if args.out is None else landing(args.out, "--out")   # where the writes land
    if real is not None and real.exists() and not real.is_dir():
        raise user_error("--out", f"{str(args.out)!r} is a file, not a sweep folder",
                         "choose a new folder, or the folder of an earlier sweep to resume, with --out DIR")
    design = load_design(args.spec, expand=not args.dry_run)
    out = args.out or study_out("sweep", args.spec)
    if args.dry_run:
        _dry_run(args, design, out)
        return 0
    work = _work(design, args.workers, out, args.intervals)
    check_results_disk(work.disk_bytes, out, "grid", "sweep fewer values, or choose a folder on a larger "
                                                     "disk with --out DIR")
    # announced at the first report: run_sweep may still refuse the folder (another sweep's)
    bar = Progress(not args.json, total=len(design.runs), unit="runs", work=work)

    def progress(done: int, total: int, failed: int) -> None:
        bar("sweep", done / total, f"{failed} failed")

    with output_lock(out):   # the figures too: no other psdsim writes DIR until they are in place
        try:
            report, rows = run_sweep(design, out, workers=args.workers, executor=args.executor,
                                     ray_address=args.ray_address, force=args.force,
                                     retry_errors=args.retry_errors, progress=progress,
                                     intervals=args.intervals)
        except (KeyboardInterrupt, WorkerDied) as exc:
            kept = len(list((out / RUNS).glob("*.json")))
            why = "interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc)
            print(f"\npsdsim: {why}; {kept} finished runs are kept in {out / RUNS}/ — run the same "
                  "command to resume", file=sys.stderr)
            return interrupted_exit(exc) if isinstance(exc, KeyboardInterrupt) else EXIT_ALL_FAILED
        if not args.no_figures:
            report.files += guarded_write(out, lambda: _figures(out, rows, design.swept, args.metric))
    doc = report.as_json()
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        extra = report.points - report.runs
        dup = f" ({extra} duplicate design points run once)" if extra else ""
        print(f"psdsim sweep · {args.spec} · {report.runs} runs{dup} over {', '.join(design.swept) or '–'}")
        print(f"  ran {report.ran}, reused {report.reused} finished earlier · ok {doc['ok']}, "
              f"infeasible {doc['infeasible']}, error {doc['error']} · {report.wall_s:.1f} s")
        print(f"  results: {report.files[0]}" + "".join(f"\n           {p}" for p in report.files[1:]))
    if report.failed:
        print(f"psdsim: {report.failed} of {report.runs} runs failed ({doc['infeasible']} infeasible, "
              f"{doc['error']} errors): see the status and error columns", file=sys.stderr)
    return 0 if doc["ok"] else EXIT_ALL_FAILED
