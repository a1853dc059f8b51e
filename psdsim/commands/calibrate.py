"""`psdsim calibrate`: fit a cost profile to traces and report how well it fits."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from psdsim.commands.common import user_error
from psdsim.sim.numbers import integer

PLOT_TYPES = (".png", ".svg", ".pdf")
HELP = "fit a cost profile to traces (nsys SQLite, Kineto JSON, MineDraft JSONL) and report how well it fits"
PROVENANCE = (("--engine", "engine name, e.g. vllm"), ("--engine-version", "engine version"),
              ("--gpu", "verifier GPU (catalog key)"), ("--drafter-gpu", "drafter GPU (catalog key)"),
              ("--target", "target model (catalog key)"), ("--draft", "draft model (catalog key)"))


def add_arguments(p: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    from psdsim.calibration.calibrate import TIMINGS
    from psdsim.calibration.ranges import PRESETS

    p.add_argument("traces", nargs="+", type=Path, metavar="TRACE",
                   help="nsys export (.sqlite), Kineto trace (.json[.gz]) or MineDraft step trace (.jsonl)")
    p.add_argument("--out", type=Path, default=Path("profile.json"),
                   help="profile file (default: profile.json)")
    p.add_argument("--ranges", default=None, choices=list(PRESETS),
                   help="range-name preset: psdsim, minedraft, vllm (default: the first whose names "
                        "match the trace; the report's notes say which)")
    p.add_argument("--range", dest="range_rules", action="append", default=[], metavar="KIND=REGEX",
                   help="extra range rule, tried before the preset's, e.g. --range draft='^my_propose$'")
    p.add_argument("--timing", choices=TIMINGS, default="busy",
                   help="busy: union of a phase's GPU ops (default); span: first to last op")
    for flag, what in PROVENANCE:
        p.add_argument(flag, help=f"provenance: {what}")
    p.add_argument("--tp", type=integer, help="provenance: the target's tensor-parallel size")
    p.add_argument("--plot", type=Path, metavar="FILE.png",
                   help="also write measured vs fitted times (PNG, SVG or PDF, by the name's extension)")
    p.add_argument("--samples", type=Path, metavar="FILE.csv", help="also write the samples as CSV")
    p.add_argument("--json", action="store_true", help="print the profile as JSON on stdout")


def _check_provenance(args: argparse.Namespace) -> None:
    """The provenance is stored in the profile and read back by `psdsim run`: a GPU or model that
    is no catalog key, or a tensor-parallel size below 1, is refused before any trace is read."""
    from psdsim.sim.catalog import load_catalog
    from psdsim.sim.scenario import did_you_mean

    if args.tp is not None and args.tp < 1:
        raise user_error("--tp", f"must be >= 1, got {args.tp}", "write the target's tensor-parallel size, "
                                                                   "e.g. --tp 4")
    cat = load_catalog()
    for flag, value, table, what in (("--gpu", args.gpu, cat.gpus, "GPU"),
                                     ("--drafter-gpu", args.drafter_gpu, cat.gpus, "GPU"),
                                     ("--target", args.target, cat.models, "model"),
                                     ("--draft", args.draft, cat.models, "model")):
        if value is not None and value not in table:
            hint = did_you_mean(value, table)
            raise user_error(flag, f"unknown {what} {value!r}",
                             hint if hint.startswith("did you mean") else
                             f"use a catalog key ({', '.join(table)}; `psdsim catalog`)")


def run(args: argparse.Namespace) -> int:
    from psdsim.calibration.calibrate import calibrate, check_trace_path
    from psdsim.calibration.report import fit_figure, report_lines
    from psdsim.calibration.samples import COLUMNS, sample_columns
    from psdsim.sim.output.results import (
        OWN_FILE_SIGNATURES,
        check_no_clash,
        check_output_file,
        output_locks,
        table_csv,
        write_files,
    )

    _check_provenance(args)
    samples_header = ",".join(COLUMNS).encode()
    if args.plot is not None and args.plot.suffix.lower() not in PLOT_TYPES:
        raise user_error("--plot", f"{str(args.plot)!r} is no figure type psdsim writes",
                         f"name it {', '.join('FILE' + t for t in PLOT_TYPES)}")
    outputs = [(option, path) for option, path in (("--out", args.out), ("--plot", args.plot),
                                                   ("--samples", args.samples)) if path is not None]
    for trace in args.traces:   # before the outputs are compared with them
        check_trace_path(trace)
    with output_locks(outputs):   # from the checks to the last rename
        check_no_clash(outputs, args.traces)
        for option, path in outputs:
            ours = (samples_header,) if option == "--samples" else OWN_FILE_SIGNATURES
            check_output_file(path, option, ours)
        source = {"engine": args.engine, "engine_version": args.engine_version, "gpu": args.gpu,
                  "drafter_gpu": args.drafter_gpu, "target": args.target, "draft": args.draft,
                  "tensor_parallel_size": args.tp}
        cal = calibrate(args.traces, preset=args.ranges, ranges=args.range_rules, timing=args.timing,
                        source=source)
        files: list[tuple[str, Path, str | bytes]] = [("--out", args.out, cal.profile.to_json())]
        if args.plot:
            files.append(("--plot", args.plot, fit_figure(cal, args.plot.suffix.lower()[1:])))
        if args.samples:
            files.append(("--samples", args.samples, table_csv(sample_columns(cal.samples))))
        write_files(files)   # all or none: a --plot that cannot be written leaves no profile either
    if args.json:
        sys.stdout.write(cal.profile.to_json())
    else:
        print("\n".join(report_lines(cal)))
        print(f"\n  profile: {args.out}" + "".join(f"\n  {p}" for _, p, _ in files[1:]))
        print(f"  use it:  psdsim run --profile {args.out}")
    return 0
