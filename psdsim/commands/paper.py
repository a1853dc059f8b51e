"""`psdsim paper`: a preset's k × dataset × method grid, reported in the paper's style."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from psdsim.commands.common import (
    Progress,
    Work,
    add_preset,
    add_set,
    announce,
    check_workers,
    default_out,
    guarded_write,
    user_error,
    workers_used,
)
from psdsim.sim.numbers import integer

HELP = "a preset's k x dataset x method grid, in the paper's style"
GRID_FIELDS = ("dataset", "method", "k", "extra")   # what studies.paper.grid sets for every run


def add_arguments(p: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    from psdsim.studies.paper import MAX_REPEATS, PAPER_REPEATS, QUICK_REQUESTS

    add_preset(p, "setting2", "the paper's configuration to reproduce (default setting2)")
    p.add_argument("--quick", action="store_true", help=f"{QUICK_REQUESTS} requests per run instead of the "
                                                        "preset's")
    add_set(p)
    p.add_argument("--repeats", type=integer, default=PAPER_REPEATS,
                   help=f"runs per point (seeds seed .. seed+N-1), averaged, with their spread (default "
                        f"{PAPER_REPEATS}: the paper's measured runs; its warm-up run is not simulated; "
                        f"at most {MAX_REPEATS})")
    p.add_argument("--workers", type=integer, default=os.cpu_count() or 1,
                   help="processes to simulate with (default: all cores)")
    p.add_argument("--out", type=Path, help="results folder (default: results/paper-PRESET-HASH)")
    p.add_argument("--json", action="store_true", help="print the improvement figures as JSON")


def run(args: argparse.Namespace) -> int:
    from psdsim.sim.footprint import check_at_once, seconds_estimate
    from psdsim.sim.output.locks import output_lock
    from psdsim.sim.output.overwrite_guard import check_results_folder
    from psdsim.sim.output.report import format_paper
    from psdsim.sim.output.results import write_folder
    from psdsim.sim.presets import PRESETS
    from psdsim.sim.scenario import load_scenario, parse_override, scenario_to_toml
    from psdsim.studies.paper import MAX_REPEATS, figures, grid, improvements, run_grid, table

    check_workers(args.workers)
    if args.repeats < 1:
        raise user_error("--repeats", f"must be >= 1, got {args.repeats}", "write --repeats 3")
    if args.repeats > MAX_REPEATS:
        raise user_error("--repeats", f"must be <= {MAX_REPEATS}, got {args.repeats:,} (a mean of "
                                      f"{MAX_REPEATS} repeats already has a tenth of one run's spread)",
                         f"write --repeats 3, the paper's, or at most {MAX_REPEATS}")
    base = load_scenario(None, args.overrides, preset=args.preset)
    for text in args.overrides:   # a field the grid sets would be overridden without a word
        name = parse_override(text)[0]
        if name == "requests" and args.quick:
            raise user_error(name, "is set by --quick, so --set requests would be ignored",
                             "drop --quick to run the grid at that many requests")
        if name in GRID_FIELDS:
            raise user_error(name, f"is set by the {args.preset} grid, so --set {name} would be ignored",
                             f"leave --set {name} out (`psdsim run --preset {args.preset} --set {text}` "
                             "runs one point)")
    preset = PRESETS[args.preset]
    out = args.out or default_out(base, "paper" + ("-quick" if args.quick else ""))
    with output_lock(out):   # from the check to the last rename
        check_results_folder(out, "paper")
        runs = grid(args.preset, base, args.quick)
        check_at_once(runs, args.workers)
        total = len(runs) * args.repeats
        seconds = sum(map(seconds_estimate, runs)) * args.repeats / workers_used(args.workers, total)
        announce(Work(f"{len(runs)} grid points × {args.repeats:,} repeats", seconds))
        progress = Progress(not args.json, total=total, unit="runs")
        rows = run_grid(runs, args.workers, progress=lambda f: progress(f"{args.preset} grid", f),
                        repeats=args.repeats)
        if not any(r["fits"] for r in rows):   # nothing to show: no folder, as run and plan
            first = rows[0]
            raise user_error("paper", f"no run of the grid fits ({len(rows)} runs; the first, "
                                      f"{first['method']}: {first['infeasible_reason']})",
                             "change the field the reason names with --set (give the GPUs more KV room)")
        gains = improvements(rows)
        infeasible = sorted({f"{r['method']}: {r['infeasible_reason']}" for r in rows if not r["fits"]})
        title = f"{args.preset}: {preset.title}" + (" (quick)" if args.quick else "")
        report = {"preset": args.preset, "title": preset.title, "quick": args.quick, "repeats": args.repeats,
                  "note": preset.note, "improvements": gains, "infeasible": infeasible}
        files: dict[str, Any] = {"paper.json": json.dumps(report, indent=2, allow_nan=False) + "\n",
                                 "results.csv": table(rows), "scenario.toml": scenario_to_toml(base),
                                 **figures(rows, title)}
        folder = guarded_write(out, lambda: write_folder(out, files, "paper"))
        if args.json:
            print(json.dumps(report, indent=2, allow_nan=False))
        else:
            print(format_paper(title, len(runs), preset.note, gains, infeasible, folder, args.repeats))
        return 0
