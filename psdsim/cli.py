"""The `psdsim` command: argument parsing, output placement and error reporting only.

Bad input ends with one line on stderr naming the field and the fix, and exit code 2; nothing is
written in that case. `--json` puts the summary, and nothing else, on stdout.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from psdsim.calibration.calibrate import TIMINGS, calibrate
from psdsim.calibration.ranges import PRESETS as RANGE_PRESETS
from psdsim.calibration.report import fit_figure, report_lines
from psdsim.calibration.samples import COLUMNS as SAMPLE_COLUMNS
from psdsim.calibration.samples import sample_columns
from psdsim.calibration.trace_error import TraceError
from psdsim.sim.catalog import CatalogError, load_catalog
from psdsim.sim.errors import ScenarioError
from psdsim.sim.output.report import format_compare, format_run, ratios
from psdsim.sim.output.results import (
    OWN_FILE_SIGNATURE,
    check_output_file,
    check_results_folder,
    result_files,
    summary_json,
    table_csv,
    write_file,
    write_folder,
    write_result,
)
from psdsim.sim.output.timeline import write_trace
from psdsim.sim.presets import PRESETS
from psdsim.sim.run import Result, compare_methods, simulate
from psdsim.sim.scenario import METHODS, Scenario, load_scenario, scenario_to_toml
from psdsim.studies.paper import QUICK_REQUESTS, grid, improvements, run_grid
from psdsim.studies.paper import figures as paper_figures
from psdsim.studies.paper import table as paper_table
from psdsim.studies.plan import load_plan
from psdsim.studies.plan_report import plan_figures, plan_lines, plan_table
from psdsim.studies.plan_verdict import run_plan
from psdsim.studies.theory_bridge import bridge, scenario_tail
from psdsim.studies.theory_report import (
    bridge_json,
    bridge_lines,
    optima_lines,
    plot_theory,
    published_lines,
    tail_lines,
    theory_json,
)
from psdsim.sweep_cli import add_sweep_parser, cmd_sweep
from psdsim.theory.model import FrontierModel
from psdsim.theory.published import A0
from psdsim.validate_cli import ENGINES, add_validate_parser, cmd_validate

EXIT_BAD_INPUT = 2
COMPARE_PAIRS = (("psd", "sd"), ("psd", "ar"), ("sd", "ar"), ("psd+tetris", "sd"),
                 ("psd", "sd-2m"), ("psd", "sd-5gpu"), ("psd", "pearl"))


class _Progress:
    """A one-line progress indicator on stderr, only when stderr is a terminal."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()

    def __call__(self, label: str, fraction: float) -> None:
        if self.enabled:
            end = "\n" if fraction >= 1.0 else ""
            sys.stderr.write(f"\r  simulating {label}: {fraction:6.1%}" + end)
            sys.stderr.flush()


def _scenario_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", nargs="?", help="scenario TOML file (default: the built-in scenario)")
    p.add_argument("--preset", choices=list(PRESETS),
                   help="start from one of the paper's configurations (file and --set apply on top)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                   help="override a scenario field, e.g. --set k=4 --set link=nvlink4")
    p.add_argument("--profile", metavar="PROFILE.json",
                   help="price steps with a fitted profile from `psdsim calibrate` (= --set profile=…)")
    p.add_argument("--out", type=Path, help="results folder (default: results/NAME-METHOD-HASH)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout only")


def _overrides(args: argparse.Namespace) -> list[str]:
    """--set values, with --profile as one more."""
    return [*args.overrides, *([f"profile={args.profile}"] if args.profile else [])]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="psdsim",
        description="Simulate batch-parallel speculative decoding (PSD) against SD and AR.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="simulate one scenario (default: the built-in Setting-2 scenario)")
    _scenario_args(run)
    run.add_argument("--method", choices=METHODS, help="override the scenario's method")
    run.add_argument("--no-write", action="store_true", help="do not write a results folder")
    run.add_argument("--plots", action="store_true",
                     help="add occupancy.png (sub-batches, queue, KV use over time) to the results")
    run.add_argument("--trace", type=Path, metavar="FILE.json",
                     help="also write the simulated timeline as Chrome trace-event JSON (open it in "
                          "ui.perfetto.dev or chrome://tracing): drafter, verifier, link lanes, driver")
    cmp = sub.add_parser("compare", help="simulate ar, sd and psd on the same scenario and seed")
    _scenario_args(cmp)
    cmp.add_argument("--methods", default="ar,sd,psd",
                     help=f"comma-separated methods, any of {','.join(METHODS)} (default: ar,sd,psd)")
    cmp.add_argument("--no-write", action="store_true", help="do not write results folders")
    scen = sub.add_parser("scenario", help="print the resolved scenario as TOML")
    scen.add_argument("scenario", nargs="?", help="scenario TOML file (default: built-in)")
    scen.add_argument("--preset", choices=list(PRESETS))
    scen.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE")
    scen.add_argument("--method", choices=METHODS)
    cat = sub.add_parser("catalog", help="list the built-in GPUs, links, models and datasets")
    cat.add_argument("--json", action="store_true", help="print the catalog as JSON")
    cat.add_argument("--catalog", help="also merge this catalog file (as a scenario's catalog field)")
    paper = sub.add_parser("paper", help="a preset's k x dataset x method grid, in the paper's style")
    paper.add_argument("--preset", choices=list(PRESETS), default="setting2")
    paper.add_argument("--quick", action="store_true",
                       help=f"{QUICK_REQUESTS} requests per run instead of the preset's")
    paper.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE")
    paper.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                       help="processes to simulate with (default: all cores)")
    paper.add_argument("--out", type=Path, help="results folder (default: results/paper-PRESET-HASH)")
    paper.add_argument("--json", action="store_true", help="print the improvement figures as JSON")
    _theory_args(sub)
    _calibrate_args(sub)
    _plan_args(sub)
    add_sweep_parser(sub)
    add_validate_parser(sub)
    eng = sub.add_parser("engine", help="run a real engine: `psdsim engine run [--engine reference|vllm] "
                                        "--method psd --k 3 …` (default: the PyTorch reference engine; "
                                        "`psdsim engine run [--engine vllm] --help`)")
    eng.add_argument("action", choices=["run"], help="run: one engine run")
    eng.add_argument("engine_args", nargs=argparse.REMAINDER,
                     help="--engine reference|vllm (default reference), then that engine's flags: "
                          "--method --k --m --requests --output-len … --json")
    return parser


def _plan_args(sub: Any) -> None:
    plan = sub.add_parser("plan", help="largest sustainable rate of every configuration of a space under "
                                       "latency objectives; Pareto front; when PSD's extra GPU pays off")
    plan.add_argument("plan", type=Path, metavar="PLAN.toml",
                      help="[base] scenario fields, [space] candidate lists, [slo] objectives, [search]")
    plan.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                      help="override a base scenario field")
    plan.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                      help="processes to search with (default: all cores)")
    plan.add_argument("--out", type=Path, help="results folder (default: results/plan-NAME-HASH)")
    plan.add_argument("--no-figures", action="store_true", help="skip the figures (faster)")
    plan.add_argument("--json", action="store_true", help="print the rows, front and verdicts as JSON")


def _calibrate_args(sub: Any) -> None:
    cal = sub.add_parser("calibrate", help="fit a cost profile to traces (nsys SQLite, Kineto JSON, "
                                           "MineDraft JSONL) and report how well it fits")
    cal.add_argument("traces", nargs="+", type=Path, metavar="TRACE",
                     help="nsys export (.sqlite), Kineto trace (.json[.gz]) or MineDraft step trace (.jsonl)")
    cal.add_argument("--out", type=Path, default=Path("profile.json"),
                     help="profile file (default: profile.json)")
    cal.add_argument("--ranges", default="psdsim", choices=list(RANGE_PRESETS),
                     help="range-name preset: psdsim (default), minedraft, vllm")
    cal.add_argument("--range", dest="range_rules", action="append", default=[], metavar="KIND=REGEX",
                     help="extra range rule, tried before the preset's, e.g. --range draft='^my_propose$'")
    cal.add_argument("--timing", choices=TIMINGS, default="busy",
                     help="busy: union of a phase's GPU ops (default); span: first to last op")
    for flag, what in (("--engine", "engine name, e.g. vllm"), ("--engine-version", "engine version"),
                       ("--gpu", "verifier GPU (catalog key)"),
                       ("--drafter-gpu", "drafter GPU (catalog key)"),
                       ("--target", "target model (catalog key)"), ("--draft", "draft model (catalog key)")):
        cal.add_argument(flag, help=f"provenance: {what}")
    cal.add_argument("--tp", type=int, help="provenance: the target's tensor-parallel size")
    cal.add_argument("--plot", type=Path, metavar="FILE.png",
                     help="also write measured vs fitted times (PNG, or SVG by extension)")
    cal.add_argument("--samples", type=Path, metavar="FILE.csv", help="also write the samples as CSV")
    cal.add_argument("--json", action="store_true", help="print the profile as JSON on stdout")


def _theory_args(sub: Any) -> None:
    th = sub.add_parser(
        "theory", help="closed-form PSD theory (optima, ratio, published constants); "
                       "--tail and --bridge tie it to a scenario")
    th.add_argument("--alpha", type=float, default=1.0, help="frontier sharpness (1/time unit)")
    th.add_argument("--V", type=float, default=A0, help="verification time per step (default a0)")
    th.add_argument("--c", type=float, default=0.0, help="PSD link time on the verifier's side")
    th.add_argument("--c-drafter", type=float, default=0.0, help="PSD link time on the drafter's side")
    th.add_argument("--serial-psd", type=float, default=0.0, help="PSD time outside the overlap")
    th.add_argument("--serial-sd", type=float, default=0.0, help="SD time besides draft + verify")
    th.add_argument("--bonus", type=float, default=0.0,
                    help="tokens per verification beyond the frontier (1 counts the bonus token)")
    th.add_argument("--scale", type=float, default=1.0, help="tokens the frontier saturates at")
    th.add_argument("--t-token", type=float, help="drafting time per draft token: report the best whole k")
    th.add_argument("--k-max", type=int, default=32, help="largest k considered (default 32)")
    th.add_argument("--plot", type=Path, metavar="DIR", help="write the theory figures (PNG and SVG)")
    th.add_argument("--json", action="store_true", help="print the results as JSON")
    th.add_argument("--tail", action="store_true",
                    help="expected parallelization rate of the scenario's finite request pool")
    th.add_argument("--bridge", action="store_true",
                    help="simulate SD and PSD over --ks and compare with the fitted theory")
    th.add_argument("--ks", default="1-6", help="k values for --bridge: 1-6 or 1,2,4 (default 1-6)")
    th.add_argument("scenario", nargs="?", help="scenario for --tail/--bridge (default: built-in)")
    th.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE")


def _default_out(s: Scenario, label: str) -> Path:
    return Path("results") / f"{s.name}-{label}-{s.digest()}"


def _write(out: Path, write: Any, option: str = "--out",
           fix: str = "choose a writable folder with --out DIR") -> Path:
    try:
        return write()
    except OSError as exc:
        raise ScenarioError(option, f"cannot write {str(out)!r} ({exc.strerror or exc})", fix) from None


def cmd_run(args: argparse.Namespace) -> int:
    s = load_scenario(args.scenario, _overrides(args), args.method, args.preset)
    trace = args.trace
    if trace is not None and not trace.parent.is_dir():  # checked first: a typo costs no run
        raise ScenarioError("--trace", f"cannot write {str(trace)!r} (no folder {str(trace.parent)!r})",
                            "choose a file in an existing folder with --trace FILE")
    if trace is not None:
        check_output_file(trace, "--trace")
    out = None if args.no_write else args.out or _default_out(s, s.method)
    if out is not None:
        check_results_folder(out, "run")
    progress = _Progress(not args.json)
    result: Result = simulate(s, progress=lambda f: progress(s.method, f), timeline=trace is not None)
    if not result.fits:
        if args.json:
            sys.stdout.write(summary_json(result.summary))
        field = result.memory.field or "gpu"
        print(f"psdsim: error: {field}: {result.summary['infeasible_reason']}; fix: raise "
              "gpu_memory_utilization or tensor_parallel_size, or choose a GPU with more memory",
              file=sys.stderr)
        return EXIT_BAD_INPUT
    if trace is not None:
        _write(trace, lambda: write_trace(result, trace), "--trace",
               "choose a writable file with --trace FILE")
    where = None
    if out is not None:
        where = str(_write(out, lambda: write_result(result, out, plots=args.plots))) + "/"
    if args.json:
        sys.stdout.write(summary_json(result.summary))
    else:
        print(format_run(result.summary, s, where, result.wall_s))
        if trace is not None:
            print(f"  timeline: {trace} (open in ui.perfetto.dev or chrome://tracing)")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    for m in methods:
        if m not in METHODS:
            raise ScenarioError("--methods", f"unknown method {m!r}",
                                f"use a comma-separated subset of {','.join(METHODS)}")
    if not methods or len(set(methods)) != len(methods):
        raise ScenarioError("--methods", "needs distinct methods", "write e.g. --methods sd,psd")
    s = load_scenario(args.scenario, _overrides(args), preset=args.preset)
    out = None if args.no_write else args.out or _default_out(s, "compare")
    if out is not None:
        check_results_folder(out, "compare")
    progress = _Progress(not args.json)
    results = compare_methods(s, methods, progress=progress)
    summaries = {m: r.summary for m, r in results.items()}
    pairs = [(a, b) for a, b in COMPARE_PAIRS if a in methods and b in methods]
    report = {"scenario": s.name, "summaries": summaries, "ratios": ratios(summaries, pairs)}
    if out is not None:
        files: dict[str, Any] = {"compare.json": json.dumps(report, indent=2, allow_nan=False) + "\n",
                                 "scenario.toml": scenario_to_toml(s)}
        for m, r in results.items():
            files.update({f"{m}/{name}": content for name, content in result_files(r).items()})
        report_dir = _write(out, lambda: write_folder(out, files, "compare"))
    if args.json:
        sys.stdout.write(json.dumps(report, indent=2, allow_nan=False) + "\n")
    else:
        print(format_compare(summaries, s, pairs))
        if not args.no_write:
            print(f"\n  results: {report_dir}/")
    return 0 if any(r.fits for r in results.values()) else EXIT_BAD_INPUT


def cmd_scenario(args: argparse.Namespace) -> int:
    s = load_scenario(args.scenario, args.overrides, args.method, args.preset)
    sys.stdout.write(scenario_to_toml(s))
    return 0


def cmd_paper(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise ScenarioError("--workers", f"must be >= 1, got {args.workers}", "write --workers 2")
    base = load_scenario(None, args.overrides, preset=args.preset)
    preset = PRESETS[args.preset]
    label = "paper" + ("-quick" if args.quick else "")
    out = args.out or _default_out(base, label)
    check_results_folder(out, "paper")
    runs = grid(args.preset, base, args.quick)
    progress = _Progress(not args.json)
    rows = run_grid(runs, args.workers, progress=lambda f: progress(f"{args.preset} grid", f))
    gains = improvements(rows)
    infeasible = sorted({f"{r['method']}: {r['infeasible_reason']}" for r in rows if not r["fits"]})
    title = f"{args.preset}: {preset.title}" + (" (quick)" if args.quick else "")
    report = {"preset": args.preset, "title": preset.title, "quick": args.quick,
              "note": preset.note, "improvements": gains, "infeasible": infeasible}
    files: dict[str, Any] = {"paper.json": json.dumps(report, indent=2, allow_nan=False) + "\n",
                             "results.csv": paper_table(rows), "scenario.toml": scenario_to_toml(base),
                             **paper_figures(rows, title)}
    folder = _write(out, lambda: write_folder(out, files, "paper"))
    if args.json:
        print(json.dumps(report, indent=2, allow_nan=False))
        return 0
    print(f"psdsim paper · {title} · {len(runs)} runs")
    if preset.note:
        print(f"  note: {preset.note}")
    print(f"  {'dataset/variant':<24}{'best k':>7}{'tok/s':>9}{'max vs SD':>11}{'E2EL vs SD':>12}"
          f"{'vs best BL':>12}{'vs sd-2m':>10}{'vs sd-5gpu':>12}")
    for key, g in gains.items():
        def pct(name: str, g: dict[str, Any] = g) -> str:
            value = g.get(name)
            return f"{value:+.1%}" if value is not None else "–"
        print(f"  {key:<24}{g['best_k']:>7}{g['best_throughput']:>9.1f}{pct('max_throughput_gain_vs_sd'):>11}"
              f"{pct('max_e2el_gain_vs_sd'):>12}{pct('gain_vs_best_baseline'):>12}"
              f"{pct('best_vs_sd-2m'):>10}{pct('best_vs_sd-5gpu'):>12}")
    for line in infeasible:
        print(f"  {line}")
    print("\n  best BL = the paper's baselines (SD, PEARL) at their best k; sd-2m and sd-5gpu are the")
    print(f"  memory-fair and GPU-fair comparisons the paper did not run. results: {folder}/")
    return 0


def cmd_catalog(args: argparse.Namespace) -> int:
    try:
        cat = load_catalog(args.catalog)
    except CatalogError as exc:
        raise ScenarioError("--catalog", str(exc), "fix the catalog file") from None
    if args.json:
        doc = {
            "gpus": {k: vars(v) for k, v in cat.gpus.items()},
            "links": {k: vars(v) for k, v in cat.links.items()},
            "models": {k: {**vars(v), "total_params": v.total_params,
                           "weight_gb": v.weight_bytes / 1e9,
                           "kv_bytes_per_token": v.kv_bytes_per_token} for k, v in cat.models.items()},
            "datasets": {k: {"max_requests": v.max_requests, "min_prompt": v.min_prompt,
                             "max_prompt": v.max_prompt, "source": v.source}
                         for k, v in cat.datasets.items()},
            "acceptance": {f"{d} -> {t}": {"alpha": p.alpha, "source": p.source}
                           for (d, t), p in cat.acceptance.items()},
        }
        print(json.dumps(doc, indent=2))
        return 0
    print("GPUs")
    for k, g in cat.gpus.items():
        fp8 = f"{g.fp8_tflops:>5.0f} FP8" if g.fp8_tflops else "   no FP8"
        print(f"  {k:<11} {g.memory_gb:>5.0f} GB  {g.memory_bandwidth_gbps:>6.0f} GB/s  "
              f"{g.bf16_tflops:>5.0f} TFLOPS bf16 {fp8}  {'NVLink' if g.nvlink else 'PCIe only'}")
    print("links (per direction; all-reduce bus bandwidth)")
    for k, ln in cat.links.items():
        print(f"  {k:<13} p2p {ln.p2p_latency_us:>4.0f} us + {ln.p2p_bandwidth_gbps:>5.0f} GB/s   "
              f"all-reduce {ln.allreduce_latency_us:>4.0f} us + {ln.allreduce_busbw_gbps:>5.0f} GB/s")
    print("models")
    for k, md in cat.models.items():
        kind = []
        if md.moe:
            kind.append(f"MoE {md.experts}x{md.experts_per_token}, {md.active_params / 1e9:.1f} B active")
        if md.compute == "fp8":
            kind.append("FP8")
        elif md.bytes_per_param < 2:
            kind.append(f"{md.bytes_per_param * 8:.1f}-bit weights")
        if md.eagle:
            kind.append("EAGLE head")
        extra = f" [{'; '.join(kind)}]" if kind else ""
        print(f"  {k:<20} {md.total_params / 1e9:>7.2f} B params  {md.weight_bytes / 1e9:>7.2f} GB  "
              f"KV {md.kv_bytes_per_token / 1024:>6.1f} KiB/token{extra}  ({md.hf_id})")
    print("datasets (prompt tokens, MineDraft filters)")
    for k, d in cat.datasets.items():
        limit = f"{d.max_requests} prompts" if d.max_requests else "unlimited"
        print(f"  {k:<11} {d.min_prompt}–{d.max_prompt} tokens, {limit}")
    print("acceptance priors (per-token, temperature 1.0, estimates)")
    for (d, t), p in cat.acceptance.items():
        print(f"  {d} -> {t}: {p.alpha}")
    print("\nEvery entry names its source: `psdsim catalog --json`, or sim/catalog/*.toml.")
    return 0


def _parse_ks(text: str) -> list[int]:
    try:
        if "-" in text:
            lo, hi = (int(x) for x in text.split("-", 1))
            ks = list(range(lo, hi + 1))
        else:
            ks = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        ks = []
    if len(ks) < 2 or min(ks) < 1 or max(ks) > 32 or len(set(ks)) != len(ks):
        raise ScenarioError("--ks", f"expected at least two distinct k in 1..32, got {text!r}",
                            "write e.g. --ks 1-6 or --ks 1,2,4,8")
    return ks


def _theory_model(args: argparse.Namespace) -> FrontierModel:
    for name in ("alpha", "V", "scale"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value > 0):
            raise ScenarioError(f"--{name}", f"must be a positive number, got {value}",
                                f"write e.g. --{name} 1.0")
    for name in ("c", "c_drafter", "serial_psd", "serial_sd", "bonus"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value >= 0):
            flag = "--" + name.replace("_", "-")
            raise ScenarioError(flag, f"must be >= 0, got {value}", f"write e.g. {flag} 0")
    if args.t_token is not None and not (math.isfinite(args.t_token) and args.t_token > 0):
        raise ScenarioError("--t-token", f"must be a positive number, got {args.t_token}",
                            "write e.g. --t-token 0.1")
    if args.k_max < 1:
        raise ScenarioError("--k-max", f"must be >= 1, got {args.k_max}", "write e.g. --k-max 16")
    return FrontierModel(alpha=args.alpha, V=args.V, bonus=args.bonus, scale=args.scale,
                         comm=args.c, comm_drafter=args.c_drafter, serial_psd=args.serial_psd,
                         serial_sd=args.serial_sd)


def cmd_theory(args: argparse.Namespace) -> int:
    doc: dict[str, Any] = {}
    lines: list[str] = []
    if args.tail or args.bridge:
        s = load_scenario(args.scenario, args.overrides)
        if args.tail:
            est = scenario_tail(s)
            doc["tail"] = {"requests": s.requests, "m": s.m, **vars(est)}
            lines += tail_lines(est, s.requests, s.m)
        if args.bridge:
            progress = _Progress(not args.json)
            rep = bridge(s, _parse_ks(args.ks), progress=lambda f: progress("bridge", f))
            doc["bridge"] = bridge_json(rep)
            lines += bridge_lines(rep)
    else:
        m = _theory_model(args)
        doc = theory_json(m, args.t_token, args.k_max)
        lines += [*optima_lines(m, args.t_token, args.k_max), "", *published_lines()]
        if args.plot:
            paths = _write(args.plot, lambda: plot_theory(m, args.plot))
            doc["figures"] = [str(p) for p in paths]
            lines += ["", "figures: " + ", ".join(str(p) for p in paths)]
    if args.json:
        print(json.dumps(doc, indent=2, allow_nan=False))
    else:
        print("\n".join(lines))
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    samples_header = ",".join(SAMPLE_COLUMNS).encode()
    for option, path in (("--out", args.out), ("--plot", args.plot), ("--samples", args.samples)):
        if path is not None:
            check_output_file(path, option, samples_header if option == "--samples" else OWN_FILE_SIGNATURE)
    source = {"engine": args.engine, "engine_version": args.engine_version, "gpu": args.gpu,
              "drafter_gpu": args.drafter_gpu, "target": args.target, "draft": args.draft,
              "tensor_parallel_size": args.tp}
    cal = calibrate(args.traces, preset=args.ranges, ranges=args.range_rules, timing=args.timing,
                    source=source)
    files = [(args.out, cal.profile.to_json())]
    if args.plot:
        fmt = "svg" if args.plot.suffix.lower() == ".svg" else "png"
        files.append((args.plot, fit_figure(cal, fmt)))
    if args.samples:
        files.append((args.samples, table_csv(sample_columns(cal.samples))))
    for path, content in files:
        _write(path, lambda path=path, content=content: write_file(path, content))
    if args.json:
        sys.stdout.write(cal.profile.to_json())
    else:
        print("\n".join(report_lines(cal)))
        print(f"\n  profile: {args.out}" + "".join(f"\n  {p}" for p, _ in files[1:]))
        print(f"  use it:  psdsim run --profile {args.out}")
    return 0




def _pick_engine(argv: list[str]) -> tuple[str | None, list[str]]:
    """`--engine NAME` / `--engine=NAME` taken out of the engine's own arguments (default reference)."""
    rest, name = [], "reference"
    it = iter(argv)
    for item in it:
        if item == "--engine":
            name = next(it, "")
        elif item.startswith("--engine="):
            name = item.partition("=")[2]
        else:
            rest.append(item)
    return (name if name in ENGINES else None), rest


def cmd_engine(args: argparse.Namespace) -> int:
    name, rest = _pick_engine(list(args.engine_args))
    if name is None:
        print(f"psdsim: error: --engine: use one of {', '.join(ENGINES)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if name == "vllm":
        from psdsim.engine.vllm.__main__ import main as vllm_main

        return vllm_main(rest)
    from psdsim.engine.reference.__main__ import main as engine_main

    return engine_main(rest)


def cmd_plan(args: argparse.Namespace) -> int:
    if args.workers < 1:
        raise ScenarioError("--workers", f"must be >= 1, got {args.workers}", "write --workers 2")
    spec = load_plan(args.plan, args.overrides)
    out = args.out or Path("results") / f"plan-{args.plan.stem}-{spec.base.digest()}"
    check_results_folder(out, "plan")
    progress = _Progress(not args.json)
    result = run_plan(spec, args.workers, lambda f: progress("plan", f))
    report = {"rows": result.rows, "pareto": result.front, "verdicts": result.verdicts,
              "invalid": [{"config": c, "error": e} for c, e in result.invalid]}
    text = json.dumps(report, indent=2, allow_nan=False) + "\n"
    files: dict[str, Any] = {"plan.json": text, "plan.csv": plan_table(result.rows),
                             "plan.toml": args.plan.read_text(encoding="utf-8")}
    if not args.no_figures:
        files.update({f"figures/{name}": data for name, data in plan_figures(result).items()})
    folder = _write(out, lambda: write_folder(out, files, "plan"))
    if args.json:
        sys.stdout.write(text)
    else:
        print("\n".join(plan_lines(result)))
        print(f"\n  results: {folder}/")
    return 0 if any(r["max_rate_req_s"] for r in result.rows) else EXIT_BAD_INPUT


COMMANDS = {"run": cmd_run, "compare": cmd_compare, "scenario": cmd_scenario, "catalog": cmd_catalog,
            "theory": cmd_theory, "paper": cmd_paper, "calibrate": cmd_calibrate, "plan": cmd_plan,
            "engine": cmd_engine,
            "sweep": cmd_sweep, "validate": cmd_validate}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except ScenarioError as exc:
        print(f"psdsim: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except TraceError as exc:
        print(f"psdsim: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("psdsim: interrupted; nothing was written", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`psdsim catalog | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
