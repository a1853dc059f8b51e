"""`psdsim validate [SCENARIO] --engine reference|vllm`: argument parsing and reporting for
engine/validate.py (the reference engine: SD and AR calibrate, PSD and PEARL are predicted) and
engine/validate_vllm.py (vLLM: AR runs calibrate, SD is predicted).

The engine configuration comes from the flags (and, where given, a scenario's workload fields:
k, m, requests, output_len, prompt_len, seed, max_num_batched_tokens); the models are the
engine's own. `--set` means what it means everywhere (psdsim/commands/engine_sets.py): a bare
FIELD is a scenario field, `engine.FIELD` the engine's configuration, `model.FIELD` its built-in
models (vLLM's tiny pair included). Bad input is one line on stderr and exit code 2, before any engine
runs.

`psdsim validate --traces RUN_DIR…` validates recorded real runs instead (engine/validate/traces.py:
each folder's manifest says what ran; docs/validating-minedraft-runs.md); `--max-error` and
`--junit` gate CI on it (engine/validate/gate.py; exit 1 when a held-out run misses).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from psdsim.commands.common import user_error
from psdsim.commands.engine_sets import SET_HELP, WORKLOAD, engine_error, scenario_workload, split_sets
from psdsim.sim.numbers import integer

HELP = ("run a real engine in AR and SD, calibrate on those runs only, simulate every method, run PSD "
        "and PEARL, compare measured with predicted (or do so from recorded runs' traces: --traces)")
ENGINES = ("reference", "vllm")
# EngineConfig fields validate sets itself, per run.
RESERVED = ("method", "k", "separate_verifier", "trace_dir", "profile")
VLLM_RESERVED = ("method", "k", "target", "draft", "profile_dir")


def add_arguments(v: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    v.add_argument("scenario", nargs="?", type=Path,
                   help="scenario TOML whose workload fields (k, m, requests, output_len, prompt_len, "
                        "seed, max_num_batched_tokens) the engine runs; flags override them")
    v.add_argument("--engine", choices=ENGINES, default="reference",
                   help="reference: the PyTorch reference engine; vllm: vLLM's SD predicted from its AR runs "
                        "(needs vLLM: docs/engines.md, The vLLM runner)")
    v.add_argument("--k", help="comma-separated k to validate (default: 1,3,5; vllm: 1,2,3,4,5)")
    v.add_argument("--m", type=integer, help="requests per verification batch (default 4; PSD runs 2m)")
    v.add_argument("--requests", type=integer, help="requests per run (default 32; vllm: 16)")
    v.add_argument("--output-len", type=integer, help="output tokens per request (default 64)")
    v.add_argument("--methods",
                   help="reference engine: methods measured against their prediction (default: psd,pearl)")
    v.add_argument("--repeats", type=integer, default=1,
                   help="engine runs per configuration, in rounds; measured = their mean, with its 95%% "
                        "interval from 2 repeats on (default 1); vllm: the AR timings too")
    v.add_argument("--models-dir", type=Path, metavar="DIR",
                   help="vllm: an existing folder where the tiny local models are built and reused "
                        "(default ~/.cache/psdsim/vllm-tiny)")
    v.add_argument("--no-contention", action="store_true",
                   help="skip the contention microbenchmark (model no slowdown of overlapped work)")
    v.add_argument("--set", dest="overrides", action="append", default=[], metavar="FIELD=VALUE",
                   help=SET_HELP)
    v.add_argument("--out", type=Path, help="report folder (default: results/validate-reference-…)")
    v.add_argument("--json", action="store_true", help="print the report as JSON on stdout only")
    v.add_argument("--traces", nargs="+", action="extend", type=Path, metavar="RUN_DIR",
                   help="validate real runs from their traces instead of running an engine: each RUN_DIR "
                        "holds one run's MineDraft JSONL (optionally nsys/Kineto) traces and a manifest.toml "
                        "(docs/validating-minedraft-runs.md)")
    v.add_argument("--bench", type=Path, metavar="RESULT.json",
                   help="predict a `vllm bench serve --save-result --save-detailed` run instead: its "
                        "requests replayed under SCENARIO and --set (the hardware, models, method), "
                        "throughput, TTFT, TPOT and E2E latency measured against predicted")
    v.add_argument("--max-error", action="append", default=[], metavar="METRIC=PCT",
                   help="--traces: exit 1 when a held-out run's |error| in METRIC (throughput, e2el, p50, "
                        "p99, par_rate, vsr) exceeds PCT percent; --bench: METRIC among throughput, ttft, "
                        "tpot, e2el (p50s) and the report's keys; repeatable")
    v.add_argument("--junit", type=Path, metavar="FILE", help="--traces: also write the rows as JUnit XML")


def _ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(integer(x) for x in text.split(",") if x.strip())
    except ValueError:
        ks = ()
    if not ks or min(ks) < 1 or max(ks) > 16 or len(set(ks)) != len(ks):
        raise user_error("--k", f"expected distinct k in 1..16, got {text!r}", "write e.g. --k 1,3,5")
    return ks


def validate_config(args: argparse.Namespace) -> Any:
    """The ValidateConfig the arguments ask for; ScenarioError (one line) when they are wrong."""
    from psdsim.engine.reference.config import EngineConfig, EngineConfigError, ModelConfig, parse_field
    from psdsim.engine.validate.reference import MEASURED_LABELS, ValidateConfig

    sets = split_sets(args.overrides, _names(EngineConfig))
    base: dict[str, Any] = {"k": "1,3,5", "m": 4, "requests": 32, "output_len": 64}
    base.update(scenario_workload(args.scenario, sets.scenario))
    for name in ("k", "m", "requests", "output_len"):
        if getattr(args, name) is not None:
            base[name] = getattr(args, name)
    ks = _ks(str(base.pop("k")))
    text = args.methods if args.methods is not None else ",".join(MEASURED_LABELS)
    methods = tuple(m.strip() for m in text.split(",") if m.strip())
    if not methods or not set(methods) <= set(MEASURED_LABELS) or len(set(methods)) != len(methods):
        raise user_error("--methods", f"expected distinct methods among {','.join(MEASURED_LABELS)}, got "
                                      f"{text!r}", "write e.g. --methods psd")
    _check_repeats(args)
    if args.models_dir is not None:
        raise user_error("--models-dir", "applies to --engine vllm only (the reference engine builds its "
                                         "models in memory)", "remove --models-dir, or add --engine vllm")
    changes: dict[str, Any] = dict(base)
    try:
        for item in sets.engine:
            name, _, value = item.partition("=")
            if name in RESERVED:
                raise user_error(f"engine.{name}", "is set by validate itself, per run",
                                 f"remove --set engine.{name}=… (--k and --methods choose the runs)")
            changes[name] = parse_field(EngineConfig, name, value)
        for item in sets.model:
            name, _, value = item.partition("=")
            changes[f"model.{name}"] = parse_field(ModelConfig, name, value)
        engine = EngineConfig().with_changes(**changes)
        for k in ks:
            engine.with_changes(method="psd", k=k).check()
    except EngineConfigError as exc:
        raise engine_error(exc, _names(EngineConfig), _names(ModelConfig)) from None
    out = args.out or Path("results") / (f"validate-{args.engine}-m{engine.m}-k{'-'.join(map(str, ks))}"
                                         f"-r{engine.requests}x{engine.output_len}")
    return ValidateConfig(engine, out, ks, methods, contention=not args.no_contention, repeats=args.repeats)


def _names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _check_repeats(args: argparse.Namespace) -> None:
    if args.repeats < 1:
        raise user_error("--repeats", f"must be >= 1, got {args.repeats}", "write e.g. --repeats 3")


def vllm_validate_config(args: argparse.Namespace) -> Any:
    """The VllmValidateConfig the arguments ask for; ScenarioError (one line) when they are wrong."""
    from psdsim.engine.validate.vllm_timing import VllmValidateConfig
    from psdsim.engine.vllm.config import EngineConfigError, TinySpec, VllmConfig, option_changes

    if args.methods is not None:
        raise user_error("--methods", "vLLM validation predicts standard SD only (PSD runs on vLLM only "
                                      "through the MineDraft plugin)",
                         "remove --methods, or use --engine reference")
    sets = split_sets(args.overrides, _names(VllmConfig))
    base: dict[str, Any] = {"m": 4, "requests": 16, "output_len": 64}
    base.update(scenario_workload(args.scenario, sets.scenario,
                                  tuple(f for f in WORKLOAD if f != "max_num_batched_tokens")))
    base.update({name: getattr(args, name) for name in ("m", "requests", "output_len")
                 if getattr(args, name) is not None})
    k_text = args.k if args.k is not None else str(base.get("k", "1,2,3,4,5"))
    base.pop("k", None)
    ks = _ks(k_text)
    if args.no_contention:
        raise user_error("--no-contention",
                         "applies to the reference engine only (vLLM's SD runs in one process)",
                         "remove --no-contention")
    _check_repeats(args)
    for item in sets.engine:
        name = item.partition("=")[0]
        if name in VLLM_RESERVED:
            raise user_error(f"engine.{name}", "is set by validate itself (it runs and describes the tiny "
                                               "local pair, SD at each --k)", f"remove --set engine.{name}=…")
    if args.models_dir is not None:
        if any(item.partition("=")[0] == "models_dir" for item in sets.engine):
            raise user_error("--models-dir", "given twice (also as --set engine.models_dir)",
                             "keep one of them")
        base["models_dir"] = _models_dir(args.models_dir)
    try:
        options = [*sets.engine, *(f"tiny.{item}" for item in sets.model)]
        changes = {**base, **option_changes(options)}
        engine = VllmConfig(method="sd").with_changes(**changes)
        for k in ks:
            engine.with_changes(k=k).check()
    except EngineConfigError as exc:
        raise engine_error(exc, _names(VllmConfig), _names(TinySpec)) from None
    out = args.out or Path("results") / (f"validate-vllm-m{engine.m}-k{'-'.join(map(str, ks))}"
                                         f"-r{engine.requests}x{engine.output_len}")
    return VllmValidateConfig(engine, out, ks, repeats=args.repeats)


def _models_dir(path: Path) -> Path:
    """--models-dir must name a folder that exists: a typo would otherwise build the models in a
    new folder nobody asked for (engine.models_dir, like `engine run`, still creates it)."""
    from psdsim.sim.input_paths import input_folder

    input_folder(path, "--models-dir", f"create it first (mkdir -p {path}) or leave --models-dir out for "
                 "~/.cache/psdsim/vllm-tiny")
    return path


def cmd_validate_vllm(args: argparse.Namespace) -> int:
    cfg = vllm_validate_config(args)
    from psdsim.engine.vllm.runner import VllmUnavailable, require_vllm

    try:
        require_vllm(cfg.base)
    except VllmUnavailable as exc:
        raise user_error("--engine", str(exc),
                         "install vLLM as described, or use --engine reference") from None
    from psdsim.sim.output.atomic_writes import claim_folder
    from psdsim.sim.output.locks import output_lock

    with output_lock(cfg.out):   # from the check to the last file written
        claim_folder(cfg.out, "validate")
        from psdsim.engine.validate.vllm import run_validate
        from psdsim.engine.vllm.__main__ import stdout_to_stderr
        from psdsim.engine.vllm.config import EngineConfigError, TinySpec, VllmConfig

        try:
            with stdout_to_stderr(True):   # vLLM's engine processes log to stdout: the report's place
                report = run_validate(cfg, log=_logger(args.json))
        except EngineConfigError as exc:   # a model it cannot load or build
            raise engine_error(exc, _names(VllmConfig), _names(TinySpec)) from None
    from psdsim.engine.validate.reference import report_json
    from psdsim.engine.validate.vllm import table_lines

    if args.json:
        sys.stdout.write(report_json(report))
        return 0
    print(f"psdsim validate · vLLM {report.get('engine_version') or ''} · m={cfg.base.m}, "
          f"{cfg.base.requests} requests × {cfg.base.output_len} tokens, k={','.join(map(str, cfg.ks))}; "
          "profile from AR runs of the target, a deeper target and the draft; per SD step, from SD k=1")
    print("\n".join(table_lines(report)))
    print(f"\n  report: {cfg.out / 'validate.json'}, {cfg.out / 'validate.png'}")
    return 0


def _logger(json_out: bool) -> Callable[[str], None]:
    """Progress lines: on stdout with the report, so that stderr holds nothing but a failure's one
    line; with --json (stdout is the JSON alone) on stderr, and only when it is a terminal."""
    def log(line: str) -> None:
        if not json_out:
            print(f"  {line}", flush=True)
        elif sys.stderr.isatty():
            print(f"  {line}", file=sys.stderr, flush=True)
    return log


def run_traces(args: argparse.Namespace) -> int:
    """`validate --traces`: what ran comes from the manifests, so the engine flags do not apply;
    the work is engine/validate/traces.py's, the gate engine/validate/gate.py's. Exit 1 when a
    gate misses."""
    engine_flags = (("SCENARIO", args.scenario is not None), ("--engine", args.engine != "reference"),
                    ("--k", args.k is not None), ("--m", args.m is not None),
                    ("--requests", args.requests is not None),
                    ("--output-len", args.output_len is not None), ("--methods", args.methods is not None),
                    ("--repeats", args.repeats != 1), ("--no-contention", args.no_contention),
                    ("--models-dir", args.models_dir is not None),
                    ("--set", bool(args.overrides)))
    for flag, given in engine_flags:
        if given:
            raise user_error(flag, "does not apply to --traces (each run's manifest says what ran)",
                             f"remove {flag}")
    from psdsim.engine.validate.gate import check, gate_line, junit_xml, parse_max_errors
    from psdsim.engine.validate.reference import report_json
    from psdsim.engine.validate.report import table_lines
    from psdsim.engine.validate.run_folders import check_run_paths
    from psdsim.engine.validate.traces import summary_lines, validate_traces
    from psdsim.sim.output.atomic_writes import claim_folder, write_files
    from psdsim.sim.output.locks import output_locks
    from psdsim.sim.output.overwrite_guard import check_no_clash, check_output_file, check_results_folder

    bounds = parse_max_errors(args.max_error)
    out = args.out or Path("results") / "validate-traces"
    check_run_paths(args.traces)
    with output_locks([("--out", out), ("--junit", args.junit)]):   # from the checks to the last rename
        check_results_folder(out, "validate")
        # neither output over a trace folder, nor the JUnit file inside the results folder (over its report)
        check_no_clash([("--out", out), *([("--junit", args.junit)] if args.junit is not None else [])],
                       args.traces)
        if args.junit is not None:
            check_output_file(args.junit, "--junit")
        report, files = validate_traces(args.traces, out, log=_logger(args.json))
        report["gate"] = check(report["rows"], bounds)
        files["validate.json"] = report_json(report)
        claim_folder(out, "validate")
        write_files([*(("--out", out / name, content) for name, content in files.items()),
                     *([("--junit", args.junit, junit_xml(report))] if args.junit is not None else [])])
    if args.json:
        sys.stdout.write(report_json(report))
    else:
        print(f"psdsim validate · {len(report['rows'])} runs from their traces · acceptance spread "
              f"(fitted on SD): {report['acceptance']['spread']:g}")
        print("\n".join([*table_lines(report), *summary_lines(report)]))
        if bounds:
            print(f"  {gate_line(report['gate'])}")
        print(f"\n  report: {out / 'validate.json'}, {out / 'validate.png'}")
    if not report["gate"]["passed"]:
        print(f"psdsim: {gate_line(report['gate'])}", file=sys.stderr)
        return 1
    return 0


def run_bench(args: argparse.Namespace) -> int:
    """`validate --bench`: the scenario and --set describe the serving system, the result its
    traffic and what was measured (engine/validate/bench.py). Exit 1 when a gate misses."""
    engine_flags = (("--traces", args.traces is not None), ("--engine", args.engine != "reference"),
                    ("--k", args.k is not None), ("--m", args.m is not None),
                    ("--requests", args.requests is not None),
                    ("--output-len", args.output_len is not None), ("--methods", args.methods is not None),
                    ("--repeats", args.repeats != 1), ("--no-contention", args.no_contention),
                    ("--models-dir", args.models_dir is not None), ("--out", args.out is not None),
                    ("--junit", args.junit is not None))
    for flag, given in engine_flags:
        if given:
            raise user_error(flag, "does not apply to --bench (the result is the run; SCENARIO and --set "
                                   "describe the system)", f"remove {flag}")
    from psdsim.engine.validate.bench import ALIASES, KEYS, table_lines, validate_bench
    from psdsim.engine.validate.gate import check, gate_line, parse_max_errors
    from psdsim.engine.validate.reference import report_json

    bounds = parse_max_errors(args.max_error, KEYS, ALIASES)
    report = validate_bench(args.bench, args.scenario, args.overrides)
    report["gate"] = check(report["rows"], bounds)
    if args.json:
        sys.stdout.write(report_json(report))
    else:
        b, s = report["bench"], report["scenario"]
        pair = s["target"] if s["method"] == "ar" else f"{s['draft']} -> {s['target']}"
        print(f"psdsim validate · {b['file']}: {report['requests']} requests of {b['model_id']} at request "
              f"rate {b['request_rate']} · predicted: {s['method']} {pair} on {s['gpu']}, k={s['k']}, "
              f"m={s['m']}")
        print("\n".join(table_lines(report)))
        if bounds:
            print(f"  {gate_line(report['gate'])}")
    for note in report["notes"]:
        print(f"psdsim: note: {note}", file=sys.stderr)
    if not report["gate"]["passed"]:
        print(f"psdsim: {gate_line(report['gate'])}", file=sys.stderr)
        return 1
    return 0


def run(args: argparse.Namespace) -> int:
    if args.bench is not None:
        return run_bench(args)
    if args.traces is not None:
        return run_traces(args)
    for flag, given in (("--max-error", args.max_error), ("--junit", args.junit)):
        if given:
            raise user_error(flag, "gates validation from traces or a benchmark result only",
                             "add --traces RUN_DIR… or --bench RESULT.json, or remove it")
    if args.engine == "vllm":
        return cmd_validate_vllm(args)
    cfg = validate_config(args)
    from psdsim.sim.output.atomic_writes import claim_folder
    from psdsim.sim.output.locks import output_lock
    from psdsim.sim.output.overwrite_guard import check_results_folder

    with output_lock(cfg.out):   # from the check to the last file written
        check_results_folder(cfg.out, "validate")  # before anything else: a refusal costs nothing
        if importlib.util.find_spec("torch") is None:
            raise user_error("--engine", "the reference engine needs PyTorch",
                             "pip install 'psdsim[engine]' (CPU only: pip install torch==2.13.0)")
        claim_folder(cfg.out, "validate")
        from psdsim.engine.validate.reference import report_json, run_validate

        report = run_validate(cfg, log=_logger(args.json))
    from psdsim.engine.validate.report import table_lines

    if args.json:
        sys.stdout.write(report_json(report))
        return 0
    m = report["machine"]
    print(f"psdsim validate · reference engine · m={cfg.engine.m}, {cfg.engine.requests} requests × "
          f"{cfg.engine.output_len} tokens, k={','.join(map(str, cfg.ks))}, {cfg.repeats} repeat(s) · "
          f"{m['cpus']} CPUs, torch {m['torch']}")
    c = report.get("contention") or {}
    if c:
        print(f"  contention (measured): drafting ×{c['draft']:.3f}, target pass ×{c['verify']:.3f} "
              "while the other side computes")
    print(f"  acceptance spread (fitted on SD): {report['acceptance']['spread']:g}")
    print("\n".join(table_lines(report)))
    print(f"\n  report: {cfg.out / 'validate.json'}, {cfg.out / 'validate.png'}")
    return 0

