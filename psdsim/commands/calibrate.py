"""`psdsim calibrate`: fit a cost profile to traces and report how well it fits, or turn vLLM's
spec-decoding metrics into the acceptance prior of a draft -> target pair."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from psdsim.commands.common import user_error
from psdsim.sim.numbers import integer

PLOT_TYPES = (".png", ".svg", ".pdf")
HELP = ("fit a cost profile to traces (nsys SQLite, Kineto JSON, MineDraft JSONL) and report how well it "
        "fits; or, from vLLM's /metrics text or server log, an acceptance prior (--draft, --target)")
PROVENANCE = (("--engine", "engine name, e.g. vllm"), ("--engine-version", "engine version"),
              ("--gpu", "verifier GPU (catalog key)"), ("--drafter-gpu", "drafter GPU (catalog key)"),
              ("--target", "target model (catalog key, or a Hugging Face config.json or its folder)"),
              ("--draft", "draft model (catalog key, or a Hugging Face config.json or its folder)"))


def add_arguments(p: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    from psdsim.calibration.calibrate import TIMINGS
    from psdsim.calibration.ranges import PRESETS

    p.add_argument("traces", nargs="+", type=Path, metavar="TRACE",
                   help="nsys export (.sqlite), Kineto trace (.json[.gz]) or MineDraft step trace (.jsonl); "
                        "or vLLM's Prometheus /metrics text or a server log with spec-decoding metrics lines")
    p.add_argument("--out", type=Path, default=None,
                   help="profile file (default: profile.json), or the acceptance prior's catalog file "
                        "(default: acceptance.toml)")
    p.add_argument("--dataset", help="acceptance: the dataset the engine served, recorded in the prior")
    p.add_argument("--acceptance-spread", type=float, default=None, metavar="S",
                   help="acceptance: the per-request Beta concentration the prior is for (default: the "
                        "scenario default, 20)")
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
    from psdsim.sim.catalog.hf_config import is_config_path
    from psdsim.sim.user_input import did_you_mean

    if args.tp is not None and args.tp < 1:
        raise user_error("--tp", f"must be >= 1, got {args.tp}", "write the target's tensor-parallel size, "
                                                                   "e.g. --tp 4")
    cat = load_catalog()
    for flag, value, table, what in (("--gpu", args.gpu, cat.gpus, "GPU"),
                                     ("--drafter-gpu", args.drafter_gpu, cat.gpus, "GPU"),
                                     ("--target", args.target, cat.models, "model"),
                                     ("--draft", args.draft, cat.models, "model")):
        if what == "model" and value not in table and is_config_path(value):
            setattr(args, flag[2:], _config_model(flag, value))
        elif value is not None and value not in table:
            keys = f"use a catalog key ({', '.join(table)}; `psdsim catalog`)"
            raise user_error(flag, f"unknown {what} {value!r}", did_you_mean(value, table, keys))


def _config_model(flag: str, value: str) -> str:
    """A model given as a config.json (or its folder), checked to be one psdsim prices, as the
    absolute path a scenario's target or draft resolves to, so that a prior for it is found."""
    from psdsim.sim.catalog.hf_config import ConfigError, derive_model

    path = str(Path(value).resolve())
    try:
        derive_model(path)
    except ConfigError as exc:
        raise user_error(flag + (f": {exc.key}" if exc.key else ""), exc.problem, exc.fix) from None
    return path


def _check_floor(profile: Any, args: argparse.Namespace) -> None:
    """Where --gpu, --target and --tp name the hardware, the profile held to the floor `psdsim run`
    holds it to on that hardware: one every such run would refuse (a trace of 1 ns kernels) is
    never written with a command to use it."""
    from psdsim.sim.errors import ScenarioError
    from psdsim.sim.profile_match import floor_warnings
    from psdsim.sim.scenario import load_scenario

    if None in (args.gpu, args.target, args.tp):
        return
    sets = [f"gpu={args.gpu}", f"target={args.target}", f"tensor_parallel_size={args.tp}",
            f"drafter_gpu={args.drafter_gpu or ''}"]
    sets += [f"draft={args.draft}"] if args.draft else ["method=ar"]
    try:
        floor_warnings(profile, load_scenario(overrides=sets))
    except ScenarioError as exc:
        if exc.field != "profile":   # the named hardware is no scenario: nothing to hold it to
            return
        raise user_error("traces", exc.problem.replace("the profile given", "the fitted profile", 1),
                         "check the trace's kernel times, or the --gpu, --target and --tp it was "
                         "recorded on") from None


def _acceptance_sources(args: argparse.Namespace) -> bool:
    """Whether the inputs are vLLM's acceptance metrics (all of them) rather than timing traces."""
    from psdsim.calibration.vllm_metrics import metrics_kind

    kinds = [metrics_kind(path) for path in args.traces]
    if any(kinds) and not all(kinds):
        raise user_error("traces", "mixes vLLM acceptance metrics with timing traces",
                         "calibrate acceptance and cost profiles in separate runs")
    return all(kinds)


def run_acceptance(args: argparse.Namespace) -> int:
    """Read the metrics, write the pair's prior as a catalog file, say what was measured."""
    from psdsim.calibration.acceptance_prior import AcceptanceEntry
    from psdsim.calibration.vllm_metrics import combined, read_acceptance
    from psdsim.sim.acceptance import MIN_ACCEPTANCE
    from psdsim.sim.output.atomic_writes import write_files
    from psdsim.sim.output.locks import output_locks
    from psdsim.sim.output.overwrite_guard import check_no_clash, check_output_file
    from psdsim.sim.scenario import FIELDS, MAX_CONCENTRATION

    for flag, value in (("--draft", args.draft), ("--target", args.target)):
        if value is None:
            raise user_error(flag, "needed for an acceptance prior",
                             "name the pair: --draft KEY --target KEY (a catalog key or a config.json)")
    for flag in ("--plot", "--samples"):
        if getattr(args, flag[2:]) is not None:
            raise user_error(flag, "applies to cost profiles, not acceptance", f"remove {flag}")
    spread = FIELDS["acceptance_spread"].default if args.acceptance_spread is None else args.acceptance_spread
    if not 0 < spread <= MAX_CONCENTRATION:
        raise user_error("--acceptance-spread", f"must be in (0, {MAX_CONCENTRATION:g}] as the scenario's "
                         f"acceptance_spread is, got {spread}",
                         "give the scenario's acceptance_spread, e.g. 20")
    _check_distinct(args.traces)
    out = args.out or Path("acceptance.toml")
    with output_locks([("--out", out)]):
        check_no_clash([("--out", out)], args.traces)
        check_output_file(out, "--out")
        counts = combined([read_acceptance(path) for path in args.traces], args.traces)
        entry = AcceptanceEntry(counts, args.draft, args.target, spread, args.dataset,
                                tuple(path.name for path in args.traces))
        if not entry.fitted_alpha >= MIN_ACCEPTANCE:
            raise user_error("traces", f"{counts.accepted:g} of {counts.draft_tokens:g} draft tokens "
                             f"accepted: the acceptance that gives it is below the simulator's smallest, "
                             f"{MIN_ACCEPTANCE:g}", "measure a run that accepted some drafts (is the draft "
                             "model the target's, with its tokenizer?)")
        write_files([("--out", out, entry.toml(out))])
    if args.json:
        print(json.dumps(entry.as_dict(), indent=2))
        return 0
    print("\n".join(f"  {line}" for line in entry.lines()))
    print(f"\n  prior:  {out}\n  use it: {entry.use(out)}")
    return 0


def _check_distinct(paths: Sequence[Path]) -> None:
    """Refuse one file given twice (by name, link or hard link): its counts would be added twice."""
    seen: dict[tuple[int, int], Path] = {}
    for path in paths:
        try:
            info = path.stat()
        except OSError:
            continue   # read_acceptance says what is wrong with it
        first = seen.setdefault((info.st_dev, info.st_ino), path)
        if first is not path:
            raise user_error("traces", f"{first} and {path} are the same file, whose counts would be added "
                             "twice", "give each engine's metrics once")


def run(args: argparse.Namespace) -> int:
    from psdsim.calibration.calibrate import calibrate, check_trace_path
    from psdsim.calibration.report import fit_figure, report_lines
    from psdsim.calibration.samples import sample_columns
    from psdsim.sim.output.atomic_writes import write_files
    from psdsim.sim.output.csv_table import table_csv
    from psdsim.sim.output.locks import output_locks
    from psdsim.sim.output.overwrite_guard import check_no_clash, check_output_file

    _check_provenance(args)
    if _acceptance_sources(args):
        return run_acceptance(args)
    args.out = args.out or Path("profile.json")
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
            check_output_file(path, option)
        source = {"engine": args.engine, "engine_version": args.engine_version, "gpu": args.gpu,
                  "drafter_gpu": args.drafter_gpu, "target": args.target, "draft": args.draft,
                  "tensor_parallel_size": args.tp}
        cal = calibrate(args.traces, preset=args.ranges, ranges=args.range_rules, timing=args.timing,
                        source=source)
        _check_floor(cal.profile, args)
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
