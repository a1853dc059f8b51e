"""`psdsim run`: simulate one scenario, print its summary, write its results folder."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from psdsim.commands.common import (
    EXIT_BAD_INPUT,
    Progress,
    add_scenario_args,
    before_scenario_runs,
    default_out,
    guarded_write,
    overrides,
    user_error,
)
from psdsim.commands.intervals import add_intervals_arg, draw_intervals

HELP = "simulate one scenario (default: the built-in Setting-2 scenario)"


def add_arguments(p: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    from psdsim.sim.scenario import METHODS

    add_scenario_args(p)
    p.add_argument("--method", choices=METHODS, help="override the scenario's method")
    p.add_argument("--no-write", action="store_true", help="do not write a results folder")
    p.add_argument("--plots", action="store_true",
                   help="add occupancy.png (sub-batches, queue, KV use over time) to the results")
    p.add_argument("--trace", type=Path, metavar="FILE.json",
                   help="also write the simulated timeline as Chrome trace-event JSON (open it in "
                        "ui.perfetto.dev or chrome://tracing): drafter, verifier, link lanes, driver")
    add_intervals_arg(p)


def run(args: argparse.Namespace) -> int:
    from psdsim.sim.footprint import check_memory
    from psdsim.sim.output.locks import output_locks
    from psdsim.sim.scenario import load_scenario

    s = load_scenario(args.scenario, overrides(args), args.method, args.preset)
    # before anything is allocated: refuse what the machine cannot hold (a trace keeps every slice)
    check_memory([s], traced=args.trace is not None)
    trace = args.trace
    if trace is not None and not trace.parent.is_dir():  # checked first: a typo costs no run
        raise user_error("--trace", f"cannot write {str(trace)!r} (no folder {str(trace.parent)!r})",
                         "choose a file in an existing folder with --trace FILE")
    out = None if args.no_write else args.out or default_out(s, s.method)
    with output_locks([("--trace", trace), ("--out", out)]):   # from the checks to the last rename
        return _simulate_and_write(args, s, trace, out)


def _simulate_and_write(args: argparse.Namespace, s: Any, trace: Path | None, out: Path | None) -> int:
    """The checks of where run writes, the simulation and the writes, all under the outputs' locks."""
    from psdsim.sim.output.atomic_writes import staged_files
    from psdsim.sim.output.intervals import format_intervals, interval_files, intervals_json
    from psdsim.sim.output.overwrite_guard import check_no_clash, check_output_file, check_results_folder
    from psdsim.sim.output.report import format_run, nothing_fits
    from psdsim.sim.output.results import result_files, summary_json, write_folder
    from psdsim.sim.output.timeline import trace_json
    from psdsim.sim.run import simulate
    from psdsim.sim.scenario import PATH_FIELDS

    if trace is not None:
        check_output_file(trace, "--trace")
    if out is not None:
        check_results_folder(out, "run")
    check_no_clash([(flag, path) for flag, path in (("--trace", trace), ("--out", out)) if path is not None])
    if trace is not None:   # a results folder may hold the scenario it re-runs; a timeline never an input
        check_no_clash([("--trace", trace)], [args.scenario, *(getattr(s, name) for name in PATH_FIELDS)])
    before_scenario_runs(s, 1, out, args.intervals)
    progress = Progress(not args.json, total=s.requests, unit="requests")
    result = simulate(s, progress=lambda f: progress(s.method, f), timeline=trace is not None)
    if not result.fits:
        if args.json:
            sys.stdout.write(summary_json(result.summary))
        print(f"psdsim: error: {nothing_fits({s.method: result}, s)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    prop = draw_intervals(args, s, [s.method])
    summary = result.summary if prop is None else {**result.summary,
                                                   "intervals": intervals_json(prop, [s.method], [])}
    where = None
    # all or none: the timeline is staged first and renamed in only once the results folder is
    traced = [] if trace is None else [("--trace", trace, trace_json(result))]
    with staged_files(traced):
        if out is not None:
            files = {**result_files(result, args.plots),
                     **(interval_files(prop, [s.method], []) if prop is not None else {})}
            where = str(guarded_write(out, lambda: write_folder(out, files, "run"))) + "/"
    if args.json:
        sys.stdout.write(summary_json(summary))
    else:
        print(format_run(result.summary, s, where, result.wall_s))
        if prop is not None:
            print("\n" + format_intervals(prop, [s.method], []))
        if trace is not None:
            print(f"  timeline: {trace} (open in ui.perfetto.dev or chrome://tracing)")
    return 0
