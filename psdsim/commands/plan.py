"""`psdsim plan`: the largest sustainable rate of every configuration of a space under latency
objectives, the Pareto front, and when PSD's extra GPU pays off."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from psdsim.commands.common import (
    Progress,
    Work,
    add_set,
    announce,
    check_workers,
    drawn_seconds,
    guarded_write,
    study_out,
    user_error,
    workers_used,
)
from psdsim.sim.numbers import integer

HELP = ("largest sustainable rate of every configuration of a space under latency objectives; Pareto "
        "front; when PSD's extra GPU pays off")


def add_arguments(p: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    from psdsim.commands.intervals import add_intervals_arg

    p.add_argument("plan", type=Path, metavar="PLAN.toml",
                   help="[base] scenario fields, [space] candidate lists, [slo] objectives, [search]")
    add_set(p, "override a [base] scenario field, e.g. --set requests=200")
    p.add_argument("--workers", type=integer, default=os.cpu_count() or 1,
                   help="processes to search with (default: all cores)")
    p.add_argument("--out", type=Path, help="results folder (default: results/plan-NAME-HASH, NAME "
                                            "the plan file's, left out when it is plan)")
    p.add_argument("--no-figures", action="store_true", help="skip the figures (faster)")
    p.add_argument("--json", action="store_true", help="print the rows, front and verdicts as JSON")
    add_intervals_arg(p)


def runs_per_search(tolerance: float) -> int:
    """About how many runs one rate search makes (studies/plan.py, max_rate): one offline, ~3 to
    bracket the rate by doubling or halving, then a bisection in log space from a factor of 2 down
    to the tolerance."""
    return 1 + 3 + math.ceil(math.log2(math.log(2) / math.log1p(tolerance)))


def _work(spec: Any, workers: int, draws: int | None) -> tuple[Work, int]:
    """The plan's estimate, its --intervals draws' searches included, and how many configurations
    it searches; first, as run_plan will, refuse what the machine cannot hold (an estimate must not
    precede a refusal)."""
    from psdsim.sim.footprint import check_at_once, seconds_estimate
    from psdsim.studies.plan import configurations

    configs = configurations(spec)[0]
    if configs:
        check_at_once(configs, workers)
    runs = runs_per_search(spec.tolerance)
    each = sum(map(seconds_estimate, configs)) * runs
    seconds = each / workers_used(workers, len(configs)) + drawn_seconds(each, draws or 0, workers)
    drawn = f", then {draws:,} draws of them" if draws else ""
    return Work(f"{len(configs):,} configurations × ~{runs} runs each{drawn}", seconds), len(configs)


def run(args: argparse.Namespace) -> int:
    from psdsim.sim.output.locks import output_lock
    from psdsim.sim.output.overwrite_guard import check_results_folder
    from psdsim.sim.output.results import write_folder
    from psdsim.studies.plan import load_plan
    from psdsim.studies.plan_report import plan_figures, plan_lines, plan_table
    from psdsim.studies.plan_verdict import run_plan

    check_workers(args.workers)
    spec = load_plan(args.plan, args.overrides)
    out = args.out or study_out("plan", args.plan, spec.base.digest())
    with output_lock(out):   # from the check to the last rename
        check_results_folder(out, "plan")
        work, configs = _work(spec, args.workers, args.intervals)
        announce(work)
        progress = Progress(not args.json, total=configs, unit="configurations")
        result = run_plan(spec, args.workers, lambda f: progress("plan", f))
        if not any(r["max_rate_req_s"] for r in result.rows):   # nothing sustains a rate: no folder
            first = result.rows[0]["limit"] if result.rows else "every configuration is invalid"
            raise user_error("plan", f"no configuration meets the objectives at any rate tried "
                                     f"({len(result.rows)} tried; the first: {first})",
                             "relax the [slo] objectives, or widen the [space] (GPUs with more memory, "
                             "tensor_parallel_size, smaller models)")
        report = {"rows": result.rows, "pareto": result.front, "verdicts": result.verdicts,
                  "invalid": [{"config": c, "error": e} for c, e in result.invalid]}
        draws = Progress(not args.json, total=configs * (args.intervals or 0), unit="searches")
        drawn = _draw_plan(args, spec, result, lambda f: draws("draws", f))
        if drawn is not None:
            report["intervals"] = drawn[0]
        text = json.dumps(report, indent=2, allow_nan=False) + "\n"
        files: dict[str, Any] = {"plan.json": text, "plan.csv": plan_table(result.rows),
                                 "plan.toml": args.plan.read_text(encoding="utf-8")}
        if not args.no_figures:
            files.update({f"figures/{name}": data for name, data in plan_figures(result).items()})
        if drawn is not None:
            files.update(drawn[2])
        folder = guarded_write(out, lambda: write_folder(out, files, "plan"))
        if args.json:
            sys.stdout.write(text)
        else:
            print("\n".join(plan_lines(result) + (drawn[1] if drawn is not None else [])))
            print(f"\n  results: {folder}/")
        return 0


def _draw_plan(args: argparse.Namespace, spec: Any, result: Any,
               progress: Any) -> tuple[dict[str, Any], list[str], dict[str, Any]] | None:
    """--intervals N: the plan's JSON, lines and files of N draws, or None without the flag."""
    if args.intervals is None:
        return None
    from psdsim.studies.plan_intervals import (
        plan_draws,
        plan_interval_files,
        plan_interval_lines,
        plan_intervals_json,
        verdict_label,
    )

    drawn = plan_draws(spec, result.configs, args.intervals, args.workers, progress)
    labels = [verdict_label(v, list(spec.space)) for v in result.verdicts]
    return (plan_intervals_json(drawn, labels), plan_interval_lines(drawn, labels),
            plan_interval_files(drawn, labels, not args.no_figures))
