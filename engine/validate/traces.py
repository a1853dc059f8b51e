"""`psdsim validate --traces RUN_DIR…`: the simulator against a real run set's own traces.

Each RUN_DIR is read and its manifest checked against its traces (run_folders.py). Then as
`validate --engine reference` (engine/validate/reference.py), with the folders in place of
engine runs: the calibration runs' traces make the profiles (assemble_profiles: AR and SD runs
by layout; a PSD or PEARL run marked calibration joins the two-process SD runs), the SD
calibration runs the acceptance per k and its spread (engine/validate/acceptance.py), every run
is simulated on its own requests (its first measured iteration's, arrivals before the first step
at 0) over PREDICTION_SEEDS seeds, and build_report compares; a run's measured value is the mean
over its iterations (each one a repeat), each measured as MineDraft measures it (measured.py).
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace as dc_replace
from pathlib import Path
from typing import Any

import numpy as np

from psdsim.calibration.trace_error import TraceError
from psdsim.engine.validate.acceptance import acceptance_mean, fit_spread, mean_accepted, verifications_std
from psdsim.engine.validate.describe import PROFILE_FILE, EngineRun
from psdsim.engine.validate.measured import measured_summary, prediction_requests
from psdsim.engine.validate.reference import (
    PREDICTION_SEEDS,
    assemble_profiles,
    mean_summary,
    predicted_summary,
    profile_doc,
)
from psdsim.engine.validate.report import build_report
from psdsim.engine.validate.run_folders import TRACE_ONLY_PROFILE, TraceRun, manifest_error, read_run
from psdsim.sim.errors import ScenarioError
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario, scenario_to_toml

PROFILE = {**PROFILE_FILE, **TRACE_ONLY_PROFILE}                  # run label -> the profile it runs on
# Where a calibration run's traces go in assemble_profiles: by process layout.
LAYOUT = {"ar": "ar", "sd": "sd", "sd-2proc": "sd-2proc", "psd": "sd-2proc", "pearl": "sd-2proc",
          "sd-2m": "sd", "psd+tetris": "sd-2proc"}
SCHEMA = 1                  # report["schema"]: bumped when a documented key changes meaning


Log = Callable[[str], None]


def validate_traces(folders: Sequence[Path], out: Path, log: Log | None = None
                    ) -> tuple[dict[str, Any], dict[str, str | bytes]]:
    """Read every run, calibrate on the calibration runs, simulate every run, compare. Returns
    the report and the files of the report folder `out` (name -> content; the scenarios name
    their profile and requests there), which the caller writes: nothing is written before
    everything has worked."""
    began = time.perf_counter()
    say = log or (lambda _: None)
    runs = [read_run(Path(f)) for f in folders]
    named = list(zip(_engine_runs(runs), runs, strict=True))
    calibrating = [r for r in runs if r.calibration]
    if not calibrating:
        raise ScenarioError("--traces", f"none of the {len(runs)} runs is a calibration run",
                            "add an SD or AR run, or mark one with [validate] calibration = true")
    presets = {r.ranges for r in calibrating if r.gpu_traces and r.ranges}
    if len(presets) > 1:
        raise ScenarioError("--traces", f"the calibration runs' GPU traces name their ranges in "
                            f"{len(presets)} ways ({', '.join(sorted(presets))})",
                            "set one [validate] ranges for all of them")
    say(f"{len(runs)} runs ({len(calibrating)} for calibration); fitting the profile")
    calib: dict[str, list[list[Path]]] = {}
    for r in calibrating:
        calib.setdefault(LAYOUT[r.label], []).append(r.files)
    preset = presets.pop() if presets else None
    profiles, cal = assemble_profiles(calib, None, _source(calibrating), preset)
    files: dict[str, str | bytes] = {name: p.to_json() for name, p in profiles.items()}
    with tempfile.TemporaryDirectory(prefix="psdsim-validate-") as tmp:
        work = Path(tmp)
        for name, text in files.items():
            (work / name).write_text(str(text), encoding="utf-8")
        for er, r in named:
            files[f"requests/{er.name}.jsonl"] = prediction_requests(r.iterations[0], r.scenario)
            (work / "requests").mkdir(exist_ok=True)
            (work / "requests" / f"{er.name}.jsonl").write_text(str(files[f"requests/{er.name}.jsonl"]),
                                                                encoding="utf-8")
        accepted, accept_doc = _accepted(cal, named)

        def scenario(er: EngineRun, r: TraceRun, rates: dict[int, float], spread: float,
                     folder: Path) -> Scenario:
            """The run's scenario as simulated: its requests, the fitted profile and acceptance
            (files in `folder`; unchecked, so that it can name the report folder)."""
            changes: dict[str, Any] = {"trace": str(folder / "requests" / f"{er.name}.jsonl"), "rate": None,
                                       "requests": len(r.iterations[0].requests) // r.scenario.n,
                                       "profile": str(folder / PROFILE[r.label]),
                                       "acceptance_spread": spread}
            if r.label != "ar":
                changes["acceptance"] = rates[er.k]
            return dc_replace(r.scenario, **changes)

        sd_runs = [(er, r) for er, r in named if r.calibration and r.label == "sd"] or \
                  [(er, r) for er, r in named if r.calibration and r.label == "sd-2proc"]

        def sd_std(name: str, spread: float, seed: int) -> float:
            er, r = next((er, r) for er, r in sd_runs if er.name == name)
            rates = {er.k: _rate(accepted[er.k], er.k, spread)}
            s = scenario(er, r, rates, spread, work).replace(seed=seed)
            return float(np.std(simulate(s).requests["verifications"]))

        if sd_runs:
            say(f"fitting the acceptance spread to {len(sd_runs)} SD runs")
            engine_std = {er.name: float(np.mean([verifications_std(it.steps) for it in r.iterations]))
                          for er, r in sd_runs}
            spread, spread_doc = fit_spread(engine_std, sd_std)
        else:
            spread = runs[0].scenario.acceptance_spread
            spread_doc = {"spread": spread,
                          "note": "no SD calibration run: the first manifest's acceptance_spread"}
        acceptance = {k: _rate(a, k, spread) for k, a in accepted.items()}
        for k, rate in acceptance.items():
            accept_doc[str(k)]["scenario_acceptance"] = rate
        predicted: dict[str, dict[str, Any]] = {}
        for er, r in named:
            say(f"simulating {er.name} ({PREDICTION_SEEDS} seeds)")
            predicted[er.name] = predicted_summary(scenario(er, r, acceptance, spread, work).replace())
            files[f"scenarios/{er.name}.toml"] = scenario_to_toml(scenario(er, r, acceptance, spread,
                                                                           out.resolve()))
    measured = {er.name: [measured_summary(it, r.scenario) for it in r.iterations] for er, r in named}
    meta = {"engine": "traces", "schema": SCHEMA,
            "runs": {er.name: _run_doc(r) for er, r in named},
            "acceptance": {"per_k": accept_doc, **spread_doc},
            "contention": dict(profiles["profile.json"].contention),
            "profiles": {name: profile_doc(p) for name, p in profiles.items()},
            "psd_profile": "profile.json", "prediction_seeds": PREDICTION_SEEDS}
    report, figure = build_report([er for er, _ in named], {n: mean_summary(m) for n, m in measured.items()},
                                  predicted, [er.name for er, r in named if r.calibration], meta, measured,
                                  measured_by="real-run traces")
    report["warnings"] = sorted({w for row in report["rows"] for w in row["sim_warnings"]})
    report["wall_s"] = time.perf_counter() - began
    files["validate.png"] = figure
    return report, files


def _engine_runs(runs: Sequence[TraceRun]) -> list[EngineRun]:
    """One EngineRun per folder: label and k, tagged with the folder's name where two share them."""
    plain = [EngineRun(r.label, r.k or r.scenario.k) for r in runs]
    counts = {er.name: sum(o.name == er.name for o in plain) for er in plain}
    out = []
    for i, (er, r) in enumerate(zip(plain, runs, strict=True)):
        if counts[er.name] > 1:
            er = EngineRun(er.label, er.k, re.sub(r"[^A-Za-z0-9._-]", "-", r.folder.name) or str(i))
        out.append(er)
    names = [er.name for er in out]
    return [EngineRun(er.label, er.k, f"{er.tag}-{i}") if names.count(er.name) > 1 else er
            for i, er in enumerate(out)]


def _source(runs: Iterable[TraceRun]) -> dict[str, Any]:
    """The calibration runs' provenance: what they all agree on (a scenario that differs is
    named by sim/profile_match.py's source warnings)."""
    docs = [{"engine": r.engine_version or "minedraft", "engine_version": r.engine_version,
             "gpu": r.scenario.gpu, "drafter_gpu": r.scenario.drafter_gpu_key, "target": r.scenario.target,
             "draft": r.scenario.draft, "tensor_parallel_size": r.scenario.tensor_parallel_size}
            for r in runs]
    return {key: value for key, value in docs[0].items() if all(d[key] == value for d in docs)}


def _accepted(cal: Any, named: Sequence[tuple[EngineRun, TraceRun]]
              ) -> tuple[dict[int, float | tuple[str, float]], dict[str, Any]]:
    """Per k of a speculative run: the SD calibration runs' mean accepted drafts per verified
    request, else (no calibration run measured that k) the acceptance a manifest at that k gives."""
    accepted: dict[int, float | tuple[str, float]] = {}
    doc: dict[str, Any] = {}
    for k in sorted({er.k for er, r in named if r.label != "ar"}):
        try:
            got, d = mean_accepted(cal.samples, [k])
            accepted[k], doc[str(k)] = got[k], d[str(k)]
        except TraceError:
            given = next((r.scenario.acceptance for er, r in named
                          if er.k == k and r.label != "ar" and r.scenario.acceptance is not None), None)
            if given is None:
                folder = next(r.folder for er, r in named if er.k == k and r.label != "ar")
                raise manifest_error(folder, "acceptance", *_no_acceptance(k, named)) from None
            accepted[k] = ("manifest", given)
            doc[str(k)] = {"from": "manifest", "acceptance": given}
    return accepted, doc


def _no_acceptance(k: int, named: Sequence[tuple[EngineRun, TraceRun]]) -> tuple[str, str]:
    """(problem, fix) when no acceptance at k is known: no SD calibration run at k, or the ones
    there are give none usable (their step records spoiled), rather than blaming a run that exists."""
    if not any(er.k == k and r.calibration and r.label == "sd" for er, r in named):
        return (f"no calibration run measured the acceptance at k = {k}",
                f"add an SD run at k = {k}, or set acceptance in this manifest")
    return (f"the SD calibration runs at k = {k} give no usable acceptance: their verify steps were "
            "dropped (a zero measured_target_time, or generated_num - accepted_num no batch size) or "
            "accept none or all of their drafts",
            f"correct those steps of the SD runs at k = {k}, or set acceptance in this manifest")


def _rate(accepted: float | tuple[str, float], k: int, spread: float) -> float:
    """The scenario's acceptance at k: fitted to the mean accepted drafts, or the manifest's."""
    return accepted[1] if isinstance(accepted, tuple) else acceptance_mean(accepted, k, spread)


def _run_doc(r: TraceRun) -> dict[str, Any]:
    return {"folder": str(r.folder), "manifest": str(r.manifest), "method": r.scenario.method, "k": r.k,
            "label": r.label, "calibration": r.calibration, "engine_version": r.engine_version,
            "traces": [str(p) for p in r.files], "iterations": len(r.iterations), "notes": list(r.notes)}


def summary_lines(report: dict[str, Any]) -> list[str]:
    """What the table does not show: the fit's own error per term, and every warning."""
    out = []
    for name, doc in report["profiles"].items():
        terms = ", ".join(f"{t} {100 * d['mape']:.1f}%" for t, d in doc["terms"].items()
                          if d["mape"] is not None)
        out.append(f"  fit error (MAPE) {name}: {terms or 'none fitted'}")
    out += [f"  warning: {w}" for w in report["warnings"]]
    for name, run in report["runs"].items():
        out += [f"  note {name}: {n}" for n in run["notes"]]
    return out
