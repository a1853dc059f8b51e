"""`psdsim validate --engine reference`: the simulator's predictions against the engine's measurements.

1. Run the reference engine in AR, and in SD at each k: once with the draft and the target in one
   process, once with the target in a process of its own (still SD: sequential steps; its traces
   time the driver <-> verifier channel, which PSD and PEARL use); `repeats` times, in rounds.
   Traces go to DIR/traces/. Then measure what no SD run shows: how much slower each model runs
   while the other process computes (engine/validate_contention.py).
2. Calibrate profiles from those traces only (calibration.calibrate; `assemble_profiles` says
   which term comes from which runs): DIR/profile.json prices PSD and PEARL.
3. Describe the engine to the simulator (engine/validate_describe.py): DIR/catalog.toml,
   DIR/requests.jsonl, DIR/scenarios/*.toml, with acceptance fitted to the SD runs
   (engine/validate_acceptance.py).
4. Simulate every engine configuration (the mean of PREDICTION_SEEDS seeds); run the engine in
   PSD and PEARL at every k (in the same rounds as step 1, so a drifting machine hits both
   alike); compare measured with predicted (engine/validate_report.py): DIR/validate.json and
   DIR/validate.png. AR and SD are in-sample (their traces made the profiles); PSD and PEARL are
   the prediction.

torch is imported only when the engine runs (engine.reference.run).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from psdsim.calibration.calibrate import Calibration, calibrate
from psdsim.calibration.minedraft_records import read_minedraft_steps
from psdsim.calibration.trace_error import TraceError
from psdsim.engine.reference.config import EngineConfig
from psdsim.engine.validate.acceptance import acceptance_mean, fit_spread, mean_accepted, verifications_std
from psdsim.engine.validate.contention import Shape, measure_contention
from psdsim.engine.validate.describe import (
    DEVICE_KEY,
    DRAFT_KEY,
    TARGET_KEY,
    EngineRun,
    catalog_toml,
    requests_jsonl,
    scenario_for,
)
from psdsim.engine.validate.report import build_report
from psdsim.sim.output.atomic_writes import write_file
from psdsim.sim.profile_schema import Bootstrap, Profile
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario, scenario_to_toml

CALIBRATION_LABELS = ("ar", "sd", "sd-2proc")
PREDICTION_SEEDS = 5   # simulated seeds averaged into each prediction
MEASURED_LABELS = ("psd", "pearl")

Log = Callable[[str], None]


@dataclass(frozen=True)
class ValidateConfig:
    """A validation: the engine's base configuration (method and k are set per run), the k to
    validate, the methods measured against their prediction, and where everything goes."""

    engine: EngineConfig
    out: Path
    ks: tuple[int, ...] = (1, 3, 5)
    measured: tuple[str, ...] = MEASURED_LABELS
    contention: bool = True     # measure and model two-process contention (engine/validate_contention.py)
    repeats: int = 1            # engine runs per configuration (in rounds; measured = their mean)

    def runs(self) -> list[EngineRun]:
        """Every engine run, in the order they execute: AR first, then k by k the calibration
        runs followed by the measured ones (so drift of a noisy machine hits both alike)."""
        out = [EngineRun("ar", self.ks[0])]
        for k in self.ks:
            out += [EngineRun(label, k) for label in ("sd", "sd-2proc", *self.measured)]
        return out


def run_validate(cfg: ValidateConfig, log: Log | None = None) -> dict[str, Any]:
    """Run the whole validation; returns the report (also written to cfg.out)."""
    began = time.perf_counter()
    measured = measure(cfg, log)
    return predict(cfg, measured, log, began)


def measure(cfg: ValidateConfig, log: Log | None = None) -> dict[str, Any]:
    """Every engine run, `repeats` times in rounds (all runs, then all again): per run the mean
    summary, every repeat's summary and trace, and the workload's prompt lengths; then the
    contention microbenchmark. Written to DIR/measured.json, so that `predict` can be run again
    on the same measurements."""
    from psdsim.engine.reference import run as engine_run

    say = log or (lambda _: None)
    repeats: dict[str, list[dict[str, Any]]] = {r.name: [] for r in cfg.runs()}
    for rep in range(cfg.repeats):
        for r in cfg.runs():
            res = engine_run(r.config(cfg.engine, cfg.out / "traces" / r.label / f"r{rep}"))
            summary = res.summary()
            repeats[r.name].append(summary)
            say(f"engine {r.name} (repeat {rep + 1}/{cfg.repeats}): {summary['throughput_tok_s']:.0f} tok/s, "
                f"{summary['decode_steps']} decode steps")
    doc: dict[str, Any] = {"summaries": {name: mean_summary(runs) for name, runs in repeats.items()},
                           "repeats": repeats, "prompt_lens": [len(q.prompt) for q in res.requests]}
    if cfg.contention:
        e = cfg.engine
        shape = Shape(e.m, sorted(cfg.ks)[len(cfg.ks) // 2], e.longest_prompt + e.output_len // 2)
        doc["contention"] = measure_contention(e.model, shape)
        say(f"contention: drafting x{doc['contention']['draft']:.3f}, target pass "
            f"x{doc['contention']['verify']:.3f} while the other runs")
    write_file(cfg.out / "measured.json", json.dumps(doc, indent=1, allow_nan=True) + "\n")
    return doc


def predict(cfg: ValidateConfig, measured: dict[str, Any], log: Log | None = None,
            began: float | None = None) -> dict[str, Any]:
    """Calibrate from the AR and SD traces, simulate every run, compare, write the report."""
    began = time.perf_counter() if began is None else began
    out = cfg.out
    summaries, prompt_lens = measured["summaries"], measured["prompt_lens"]
    traces = {name: [Path(x["trace"]) for x in runs] for name, runs in measured["repeats"].items()}
    calib = {label: [p for r in cfg.runs() if r.label == label for p in traces[r.name]]
             for label in CALIBRATION_LABELS}
    profiles, cal = assemble_profiles(calib, measured.get("contention"))
    accepted, accept_doc = mean_accepted(cal.samples, cfg.ks)
    files: dict[str, str] = {"catalog.toml": catalog_toml(cfg.engine),
                             "requests.jsonl": requests_jsonl(prompt_lens, cfg.engine.output_len),
                             **{name: p.to_json() for name, p in profiles.items()}}
    for name, text in files.items():
        write_file(out / name, text)
    folder, n = out.resolve(), len(prompt_lens)

    def sd_std(k: int, spread: float, seed: int) -> float:
        rates = {k: acceptance_mean(accepted[k], k, spread)}
        s = scenario_for(EngineRun("sd", k), cfg.engine, n, folder, rates, spread).replace(seed=seed)
        return float(np.std(simulate(s).requests["verifications"]))

    engine_std = {r.k: float(np.mean([verifications_std(read_minedraft_steps(p)) for p in traces[r.name]]))
                  for r in cfg.runs() if r.label == "sd"}
    spread, spread_doc = fit_spread(engine_std, sd_std)
    acceptance = {k: acceptance_mean(accepted[k], k, spread) for k in cfg.ks}
    for k in cfg.ks:
        accept_doc[str(k)]["scenario_acceptance"] = acceptance[k]
    predicted: dict[str, dict[str, Any]] = {}
    for r in cfg.runs():
        s = scenario_for(r, cfg.engine, n, folder, acceptance, spread)
        write_file(out / "scenarios" / f"{r.name}.toml", scenario_to_toml(s))
        predicted[r.name] = predicted_summary(s)
    meta = {"engine": "reference", "config": _config_doc(cfg), "machine": _machine(),
            "acceptance": {"per_k": accept_doc, **spread_doc},
            "contention": dict(profiles["profile.json"].contention),
            "profiles": {name: profile_doc(p) for name, p in profiles.items()},
            "psd_profile": "profile.json",
            "prediction_seeds": PREDICTION_SEEDS, "wall_s": time.perf_counter() - began}
    in_sample = [r.name for r in cfg.runs() if r.label in CALIBRATION_LABELS]
    report, figure = build_report(cfg.runs(), summaries, predicted, in_sample, meta, measured["repeats"])
    write_file(out / "validate.json", report_json(report))
    write_file(out / "validate.png", figure)
    if log is not None:
        log(f"report: {out / 'validate.json'}, {out / 'validate.png'}")
    return report


SOURCE = {"engine": "psdsim-reference", "gpu": DEVICE_KEY, "drafter_gpu": DEVICE_KEY,
          "target": TARGET_KEY, "draft": DRAFT_KEY, "tensor_parallel_size": 1}
CHANNEL = ("comm", "broadcast")


def assemble_profiles(traces: Mapping[str, Sequence[Any]], contention: dict[str, Any] | None,
                      source: dict[str, Any] | None = None, preset: str | None = "psdsim"
                      ) -> tuple[dict[str, Profile], Calibration]:
    """Profiles fitted to the AR and SD runs (calibration.calibrate), one per way the engine
    runs, and the calibration the acceptance comes from:

    - profile.json (PSD, PEARL, and SD with the target in its own process): the compute terms
      (draft, verify, prefill, draft_prefill, reject) of the one-process AR and SD runs, where
      each model runs on a core that never idles; the channel (comm, broadcast) and the step
      overhead of SD with the target in its own process, the only runs that have them; and what
      engine/validate/contention.py measures and no SD run isolates: the slowdown of overlapped
      work, and of work after a process idled (sim/overlap.py). The two-process SD runs'
      compute terms are not used: each of their passes follows idling (~5 ms a step at k = 1,
      engine/validate/contention.py) and includes that slowdown, which the simulator adds
      where (and as much as) a process idles;
      predicting those runs from one-process terms is the check that it does;
    - profile-one-process.json (SD; in-sample): the one-process compute terms, SD's overhead;
    - profile-ar.json (AR; in-sample): the same with AR's own overhead: an AR step samples its
      tokens inside the timed overhead (a speculative step times that apart, as rejection
      sampling; the simulator's AR has no such term).

    `traces` maps the labels ar, sd and sd-2proc to their runs' traces (what calibrate takes).
    A real run set (validate --traces) may lack some: the compute terms then come from the
    one-process runs there are, else from the two-process ones; each overhead from its own
    layout's runs, else from SD's, AR's or the two-process ones; without two-process runs no
    channel is fitted (the simulator prices it from the catalog's link and says so). `source`
    is the runs' provenance (default: the reference engine's), `preset` the range names of
    any nsys or Kineto traces among them (None: detected).
    """
    source = source if source is not None else {**SOURCE, "engine_version": _torch_version()}

    def fit(*labels: str) -> Calibration | None:
        paths = [p for label in labels for p in traces.get(label, ())]
        return calibrate(paths, source=source, preset=preset) if paths else None

    one, sd, ar, two = fit("ar", "sd"), fit("sd"), fit("ar"), fit("sd-2proc")
    base = one or two
    if base is None:
        raise TraceError("--traces", "no calibration traces: validation needs AR or SD runs to fit a profile",
                         "give the traces of an AR or SD run too")
    one_process = " + ".join(name for name, c in (("AR", ar), ("SD", sd)) if c is not None)
    compute_from = (f"compute from the one-process {one_process} traces" if one is not None
                    else "compute from the two-process SD traces")
    compute = {n: t for n, t in base.profile.terms.items() if n not in (*CHANNEL, "overhead")}
    accept = sd or two or base
    acc = accept.profile.acceptance

    def made(terms: dict[str, Any], what: str, extra: Calibration | None = None,
             cont: dict[str, Any] | None = None) -> Profile:
        more = extra if extra is not None and extra is not base else None
        prov = dict(base.profile.source)
        if more is not None:
            prov["traces"] = [*prov["traces"], *more.profile.source["traces"]]
        prov["terms_from"] = what
        notes = (*base.profile.notes, *(more.profile.notes if more is not None else ()),
                 f"psdsim validate: {what}")
        return Profile(terms, prov, acc, notes, cont or {},
                       bootstrap=carried_bootstrap(terms, (one, sd, ar, two)))

    def overhead(*order: tuple[Calibration | None, str]) -> tuple[dict[str, Any], str]:
        for c, who in order:
            if c is not None and "overhead" in c.profile.terms:
                return {"overhead": c.profile.terms["overhead"]}, who
        return {}, "none fitted"

    sd_first = ((sd, "SD's"), (ar, "AR's"), (two, "the two-process SD runs'"))
    if two is not None:
        channel = {n: two.profile.terms[n] for n in CHANNEL if n in two.profile.terms}
        two_ovh, _ = overhead((two, ""))
        psd_what = f"{compute_from}; comm, broadcast and overhead from the two-process SD traces"
    else:
        channel = {}
        two_ovh, who = overhead(*sd_first)
        psd_what = f"{compute_from}; overhead from {who}; no two-process runs, so no fitted comm or broadcast"
    if contention:
        psd_what += "; contention and idle slowdown measured"
    one_ovh, one_who = overhead(*sd_first)
    ar_ovh, ar_who = overhead((ar, "AR's"), *sd_first)
    out = {
        "profile.json": made({**compute, **channel, **two_ovh}, psd_what, two, contention),
        "profile-one-process.json": made({**compute, **one_ovh}, f"{compute_from}, overhead from {one_who}"),
        "profile-ar.json": made({**compute, **ar_ovh}, f"{compute_from}, overhead from {ar_who}"),
    }
    return out, accept


def carried_bootstrap(terms: Mapping[str, Any], fits: Sequence[Calibration | None]) -> Bootstrap:
    """Each term's bootstrap, from the calibration the term was taken from (the same object), so
    that a profile put together from several fits keeps every fit's uncertainty for --intervals."""
    vectors: dict[str, tuple[tuple[float, ...], ...]] = {}
    too_few: dict[str, int] = {}
    seed = 0
    for name, term in terms.items():
        for c in fits:
            if c is None or c.profile.terms.get(name) is not term or c.profile.bootstrap is None:
                continue
            boot = c.profile.bootstrap
            seed = boot.seed
            if name in boot.terms:
                vectors[name] = boot.terms[name]
            elif name in boot.too_few:
                too_few[name] = boot.too_few[name]
            break
    return Bootstrap(seed, vectors, too_few)


def report_json(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, allow_nan=False) + "\n"


def predicted_summary(s: Scenario) -> dict[str, Any]:
    """The simulator's prediction for a scenario: its summary averaged over PREDICTION_SEEDS
    seeds, without one seed's sampling noise in acceptance."""
    return mean_summary([simulate(s.replace(seed=seed)).summary for seed in range(PREDICTION_SEEDS)])


def mean_summary(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean of simulated summaries over seeds (numbers and nested numbers; the rest from the
    first): the prediction, without one seed's sampling noise in acceptance."""
    def mean(values: list[Any]) -> Any:
        first = values[0]
        if isinstance(first, dict):
            return {key: mean([v[key] for v in values]) for key in first}
        if isinstance(first, int | float) and not isinstance(first, bool) and all(
                isinstance(v, int | float) for v in values):
            return float(np.mean(values))
        return first

    return mean(summaries)


def profile_doc(p: Profile) -> dict[str, Any]:
    return {"terms_from": p.source.get("terms_from"),
            "terms": {n: {"coef": list(t.coef), "mape": t.mape, "samples": t.samples}
                      for n, t in p.terms.items()}}


def _config_doc(cfg: ValidateConfig) -> dict[str, Any]:
    doc = asdict(cfg.engine)
    doc.pop("method"), doc.pop("k"), doc.pop("trace_dir"), doc.pop("separate_verifier")
    return {**doc, "ks": list(cfg.ks), "measured": list(cfg.measured), "contention": cfg.contention,
            "repeats": cfg.repeats}


def _torch_version() -> str:
    """The PyTorch that ran the engine; predicting from stored measurements needs none."""
    try:
        import torch
    except ImportError:
        return "not installed"
    return str(torch.__version__)


def _machine() -> dict[str, Any]:
    return {"cpus": len(os.sched_getaffinity(0)), "processor": platform.processor() or platform.machine(),
            "python": sys.version.split()[0], "torch": _torch_version(), "platform": platform.platform()}
