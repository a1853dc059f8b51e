"""`psdsim sweep SPEC.toml --out DIR`: argument parsing and reporting for studies/sweep.py."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from psdsim.commands.common import check_workers, guarded_write, interrupted_exit, study_out, user_error

HELP = "run a grid or sampled design of scenarios into one table (parallel, resumable)"
EXIT_ALL_FAILED = 1


def add_arguments(sw: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    from psdsim.commands.intervals import add_intervals_arg
    from psdsim.studies.executors import EXECUTORS

    sw.add_argument("spec", type=Path, metavar="SPEC.toml",
                    help="[base] scenario fields, [grid] field = [values], [sample] random/LHS design")
    sw.add_argument("--out", type=Path, help="sweep folder (default: results/sweep-SPEC, or results/sweep "
                                             "for sweep.toml); run the same command again to resume")
    sw.add_argument("--workers", type=int, default=os.cpu_count() or 1,
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


class _Progress:
    """runs done/total, failures and ETA on stderr, only when stderr is a terminal."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self.began = time.perf_counter()
        self.first: int | None = None
        self.shown = 0.0

    def __call__(self, done: int, total: int, failed: int) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if self.first is None:
            self.first, self.began = done, now
        if done < total and now - self.shown < 0.2:
            return
        self.shown = now
        ran = done - self.first
        eta = "–" if not ran else _clock((now - self.began) / ran * (total - done))
        end = "\n" if done >= total else ""
        sys.stderr.write(f"\r  sweep: {done}/{total} runs ({done / max(total, 1):.0%}), {failed} failed, "
                         f"ETA {eta}   " + end)
        sys.stderr.flush()


def _clock(seconds: float) -> str:
    s = int(seconds + 0.5)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _figures(out: Path, rows: list[dict[str, Any]], swept: list[str], metric: str) -> list[Path]:
    from psdsim.sim.output.results import write_file
    from psdsim.studies.sweep_figures import sweep_figures

    folder = out / "figures"
    if folder.is_dir():
        for old in folder.iterdir():
            if old.suffix in (".png", ".svg"):
                old.unlink()
    ok = [r for r in rows if r["status"] == "ok"]
    if ok and "k" in swept and "m" in swept and metric not in ok[0]:
        print(f"psdsim: warning: --metric {metric!r} is not a column of the results; no heat map "
              "(see the header of results.csv)", file=sys.stderr)
    figures = sweep_figures(rows, swept, metric)
    return [write_file(folder / name, data) for name, data in figures.items()]


def run(args: argparse.Namespace) -> int:
    from psdsim.sim.output.results import landing, output_lock
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
    design = load_design(args.spec)
    out = args.out or study_out("sweep", args.spec)
    size = {"spec": str(args.spec), "points": len(design.points), "runs": len(design.runs),
            "swept": design.swept, "out": str(out)}
    if args.dry_run:
        if args.json:
            print(json.dumps(size, indent=2))
        else:
            print(f"psdsim sweep · {args.spec} · {len(design.points)} design points, {len(design.runs)} "
                  f"distinct runs over {', '.join(design.swept) or 'nothing'} (dry run: nothing written)")
        return 0
    progress = _Progress(not args.json)
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
