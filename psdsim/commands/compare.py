"""`psdsim compare`: several methods on the same scenario and seed, side by side."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
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

HELP = "simulate ar, sd and psd (or --methods) on the same scenario and seed"
COMPARE_PAIRS = (("psd", "sd"), ("psd", "ar"), ("sd", "ar"), ("psd+tetris", "sd"),
                 ("psd", "sd-2m"), ("psd", "sd-5gpu"), ("psd", "pearl"), ("adaptive", "psd"),
                 ("adaptive", "sd"), ("decoupled", "psd"), ("decoupled", "sd"))


def add_arguments(p: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    from psdsim.sim.scenario import METHODS

    add_scenario_args(p)
    p.add_argument("--methods", default="ar,sd,psd",
                   help=f"comma-separated methods, any of {','.join(METHODS)} (default: ar,sd,psd)")
    p.add_argument("--no-write", action="store_true", help="do not write results folders")
    add_intervals_arg(p)


def _methods(text: str) -> list[str]:
    from psdsim.sim.scenario import METHODS

    methods = [m.strip() for m in text.split(",") if m.strip()]
    for m in methods:
        if m not in METHODS:
            raise user_error("--methods", f"unknown method {m!r}",
                             f"use a comma-separated subset of {','.join(METHODS)}")
    if not methods:
        raise user_error("--methods", "names no method", "write e.g. --methods sd,psd")
    if len(set(methods)) != len(methods):
        raise user_error("--methods", "needs distinct methods", "write e.g. --methods sd,psd")
    return methods


def _check_each_method(s: Any, methods: Sequence[str]) -> None:
    """Validate every method's scenario before any is simulated: a field only one method needs
    (psd+tetris's extra) fails at once, naming that method, not after the others have run."""
    from psdsim.sim.errors import ScenarioError

    for m in methods:
        try:
            s.replace(method=m)
        except ScenarioError as exc:
            raise user_error(exc.field, f"{exc.problem} (--methods {m})", exc.fix) from None


def run(args: argparse.Namespace) -> int:
    from psdsim.sim.footprint import check_memory
    from psdsim.sim.output.intervals import format_intervals, interval_files, intervals_json
    from psdsim.sim.output.locks import output_locks
    from psdsim.sim.output.overwrite_guard import check_results_folder
    from psdsim.sim.output.report import format_compare, nothing_fits, ratios
    from psdsim.sim.output.results import result_files, write_folder
    from psdsim.sim.run import compare_methods
    from psdsim.sim.scenario import load_scenario, scenario_to_toml

    methods = _methods(args.methods)
    s = load_scenario(args.scenario, overrides(args), preset=args.preset)
    _check_each_method(s, methods)
    kept = f"the results of {len(methods)} method{'s' * (len(methods) != 1)} kept"
    check_memory([s] * len(methods), kept)   # every result is kept
    out = None if args.no_write else args.out or default_out(s, "compare")
    with output_locks([("--out", out)]):   # from the check to the last rename
        if out is not None:
            check_results_folder(out, "compare")
        before_scenario_runs(s, len(methods), out, args.intervals)
        progress = Progress(not args.json, total=s.requests, unit="requests")
        results = compare_methods(s, methods, progress=progress)
        if not any(r.fits for r in results.values()):   # nothing ran: no folder, no table
            print(f"psdsim: error: {nothing_fits(results, s)}", file=sys.stderr)
            return EXIT_BAD_INPUT
        summaries = {m: r.summary for m, r in results.items()}
        pairs = [(a, b) for a, b in COMPARE_PAIRS if a in methods and b in methods]
        report = {"scenario": s.name, "summaries": summaries, "ratios": ratios(summaries, pairs)}
        prop = draw_intervals(args, s, methods)
        if prop is not None:
            report["intervals"] = intervals_json(prop, methods, pairs)
        report_dir = None
        if out is not None:
            files: dict[str, Any] = {"compare.json": json.dumps(report, indent=2, allow_nan=False) + "\n",
                                     "scenario.toml": scenario_to_toml(s)}
            for m, r in results.items():
                files.update({f"{m}/{name}": content for name, content in result_files(r).items()})
            if prop is not None:
                files.update(interval_files(prop, methods, pairs))
            report_dir = guarded_write(out, lambda: write_folder(out, files, "compare"))
        if args.json:
            sys.stdout.write(json.dumps(report, indent=2, allow_nan=False) + "\n")
        else:
            print(format_compare(summaries, s, pairs))
            if prop is not None:
                print("\n" + format_intervals(prop, methods, pairs))
            if report_dir is not None:
                print(f"\n  results: {report_dir}/")
        return 0
