"""`psdsim validate --traces RUN_DIR…`: the simulator against a real run set's own traces.

Each RUN_DIR holds one real run (docs/validating-minedraft-runs.md):
- its MineDraft JSONL trace (`benchmarks/trace/*.jsonl`, one bundle per benchmark iteration; the
  warm-up iterations its file name counts are left out), read by calibration/minedraft.py;
- optionally an Nsight Systems SQLite export or Kineto traces of the same run (calibration runs
  only: they are joined with that run's JSONL, by order, as `psdsim calibrate` joins them);
- `manifest.toml`: a scenario in psdsim's own fields and tables (models, GPUs, links, TP, method,
  k, m, n, dataset or request list; relative paths from the manifest's folder) and a `[validate]`
  table: `calibration` (default: true for ar, sd and sd-5gpu runs), `engine_version`, `ranges`
  (the NVTX range preset of its GPU traces; default: detected from their range names).

What the traces say is read from them, and the manifest must agree (else one line naming the
folder, the field and the fix): k (the speculative steps' proposed_len: one value per folder;
a psd+tetris run proposes k + extra and scores at most k x m of them a full sub-batch, so its
proposed_len is checked against k + extra), m (no step batches more than max_num_seqs allows: 2m
for psd, psd+tetris and sd-2m), requests × n (request records
per iteration), every request's prompt and output length (against the manifest's request list
where it names one, else its fixed prompt_len; no more output than output_len; prompt + output
within max_model_len), and arrivals (an
offline manifest, without rate or request list, means every request arrived before the first
step began; a request list's arrival times within ARRIVAL_TOLERANCE_S). Before that, the record
fields the metrics are computed from (a request's start_us, end_us - start_us no shorter than the
decode steps that ran it, whole prompt_len and gen_len >= 1; a step's batched_requests and
is_prompt_run; accepted_num <= verify_len; a decode step that ran a request for some time) are
checked: a bad one is one line naming its file and line.

Then as `validate --engine reference` (engine/validate/reference.py), with the folders in place of
engine runs: the calibration runs' traces make the profiles (assemble_profiles: AR and SD runs
by layout; a PSD or PEARL run marked calibration joins the two-process SD runs), the SD
calibration runs the acceptance per k and its spread (engine/validate/acceptance.py), every run
is simulated on its own requests (its first measured iteration's, arrivals before the first step
at 0) over PREDICTION_SEEDS seeds, and build_report compares; a run's measured value is the mean
over its iterations (each one a repeat).

Measured metrics come from the records with MineDraft's own definitions
(benchmarks/trace/analyze_traces.py), which are the simulator's (sim/metrics.py): throughput =
tokens of decode steps / their time (end_us − start_us; tokens = generated_num, accepted + 1 per
verified request before the trim at output_len, else psdsim_kept_num, else one per scheduled
request); E2EL = (last end_us − first start_us) / prompts (request records / n, consecutive
records one prompt's samples [INFERRED: vLLM V0 adds a prompt's n samples one after another]);
latency per prompt = its last sample's end_us − start_us; VSR = Σ accepted_num / Σ verify_len;
parallelization rate = decode steps with is_parallelised / decode steps.
"""

from __future__ import annotations

import re
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from dataclasses import replace as dc_replace
from pathlib import Path
from typing import Any

import numpy as np

from psdsim.calibration.calibrate import detect_format
from psdsim.calibration.minedraft import CORRUPT, RECORD_FIX, Iteration, read_minedraft_iterations
from psdsim.calibration.ranges import PRESETS as RANGE_PRESETS
from psdsim.calibration.trace_error import TraceError
from psdsim.engine.validate.acceptance import acceptance_mean, fit_spread, mean_accepted, verifications_std
from psdsim.engine.validate.describe import PROFILE_FILE, SIM_METHOD, EngineRun, requests_jsonl
from psdsim.engine.validate.reference import (
    CALIBRATION_LABELS,
    PREDICTION_SEEDS,
    assemble_profiles,
    mean_summary,
    predicted_summary,
    profile_doc,
)
from psdsim.engine.validate.report import build_report
from psdsim.sim.errors import ScenarioError
from psdsim.sim.input_paths import input_file, input_folder, input_path
from psdsim.sim.metrics import ms_stats, ratio, step_throughput
from psdsim.sim.numbers import finite
from psdsim.sim.run import simulate
from psdsim.sim.scenario import (
    MAX_K,
    PATH_FIELDS,
    Scenario,
    read_toml,
    resolved_path_field,
    scenario_from_mapping,
    scenario_to_toml,
)
from psdsim.sim.trace_replay import scenario_trace

MANIFEST = "manifest.toml"
VALIDATE_KEYS = {"calibration": bool, "engine_version": str, "ranges": str}
# Methods the reference engine does not run, validated from real traces only: their label is
# the simulator's method (report.py's sim_method falls back to the label).
TRACE_ONLY_PROFILE = {"sd-2m": "profile-one-process.json", "psd+tetris": "profile.json"}
LABEL = {**{sim: label for label, sim in SIM_METHOD.items()},    # simulator method -> run label
         **{method: method for method in TRACE_ONLY_PROFILE}}
PROFILE = {**PROFILE_FILE, **TRACE_ONLY_PROFILE}                  # run label -> the profile it runs on
# Where a calibration run's traces go in assemble_profiles: by process layout.
LAYOUT = {"ar": "ar", "sd": "sd", "sd-2proc": "sd-2proc", "psd": "sd-2proc", "pearl": "sd-2proc",
          "sd-2m": "sd", "psd+tetris": "sd-2proc"}
# Methods whose steps batch up to 2m requests: MineDraft's two sub-batches of m (its
# --max-num-seqs m means 2m running, docs/reference/paper.md §4.2), and sd-2m's 2m by definition.
TWO_M = ("psd", "psd+tetris", "sd-2m")
ARRIVAL_TOLERANCE_S = 0.1   # a request list's arrival against the traced one (the engine adds each late)
SCHEMA = 1                  # report["schema"]: bumped when a documented key changes meaning
US = 1e-6

Log = Callable[[str], None]


@dataclass(frozen=True)
class TraceRun:
    """One RUN_DIR, read and checked against its manifest."""

    folder: Path
    scenario: Scenario          # the manifest's, as written
    label: str                  # engine-run label (a key of SIM_METHOD)
    k: int | None               # from the traces (None: AR)
    calibration: bool
    engine_version: str
    ranges: str | None          # range preset of its GPU traces (None: detected)
    jsonl: tuple[Path, ...]
    gpu_traces: tuple[Path, ...]
    iterations: tuple[Iteration, ...]
    notes: tuple[str, ...]

    @property
    def manifest(self) -> Path:
        return self.folder / MANIFEST

    @property
    def files(self) -> list[Path]:
        """The run's traces, as one run for calibrate (an nsys/Kineto export joins its JSONL)."""
        return [*self.jsonl, *self.gpu_traces]


def _bad(run: Path, field: str, problem: str, fix: str) -> ScenarioError:
    return ScenarioError(f"{run / MANIFEST}: {field}", problem, fix)


# ---------------------------------------------------------------------------------------------
# Reading a run folder


RUN_DIR_FIX = "give folders that each hold one run's traces and its manifest.toml"


def check_run_paths(folders: Iterable[Path]) -> None:
    """Refuse, in one line naming --traces, a RUN_DIR the system cannot follow (a loop of links,
    a folder on the way psdsim may not search): checked before the outputs are compared with
    these folders; whether each is a folder is read_run's to say."""
    for folder in folders:
        input_path(folder, "--traces", RUN_DIR_FIX)


def read_run(folder: Path) -> TraceRun:
    """A RUN_DIR's manifest and traces, each claim of the manifest checked against the traces."""
    folder = Path(folder)
    input_folder(folder, "--traces", RUN_DIR_FIX)
    manifest = folder / MANIFEST
    form = "the run's scenario plus a [validate] table (docs/validating-minedraft-runs.md)"
    if not (manifest.exists() or manifest.is_symlink()):
        raise ScenarioError("--traces", f"{folder} has no {MANIFEST}", f"write one: {form}")
    input_file(manifest, "--traces", f"a {MANIFEST}", f"make it a TOML file: {form}")  # a pipe, a folder
    _, doc = read_toml(manifest, str(manifest), "the run's manifest")
    options = _validate_table(folder, doc.pop("validate", {}))
    s = _scenario(folder, doc)
    if s.method not in LABEL:
        raise _bad(folder, "method", f"{s.method} runs cannot be validated from traces yet",
                   f"use one of {', '.join(LABEL)}")
    label = LABEL[s.method]
    named = {Path(getattr(s, f)).resolve() for f in PATH_FIELDS if getattr(s, f)}
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.name != MANIFEST
                   and not p.name.startswith(".") and p.resolve() not in named)
    formats = {p: detect_format(p) for p in files}
    jsonl = tuple(p for p in files if formats[p] == "minedraft")
    if not jsonl:
        raise ScenarioError("--traces", f"{folder} holds no MineDraft JSONL step trace",
                            "copy the run's benchmarks/trace/*.jsonl into the folder")
    sourced: list[tuple[Path, Iteration]] = []
    notes: list[str] = []
    for p in jsonl:
        its, why = read_minedraft_iterations(p)
        sourced += [(p, it) for it in its]
        notes += [f"{p.name}: {n}" for n in why]
    if not sourced:
        raise ScenarioError("--traces", f"{folder}: every iteration of its traces is a warm-up",
                            "give a trace with measured iterations (MineDraft's --num-iters >= 1)")
    for p, it in sourced:
        _check_records(p, it)
    k = _check_k(folder, s, sourced)
    for p, it in sourced:
        _check_iteration(folder, s, it, f"{p.name} (iteration at line {it.bundle})" if it.bundle else p.name)
    iterations = [it for _, it in sourced]
    if s.profile:
        notes.append("the manifest's profile is not used: the profile is fitted to the calibration runs")
    calibration = options.get("calibration", label in CALIBRATION_LABELS)
    gpu_traces = tuple(p for p in files if formats[p] != "minedraft")
    if gpu_traces and not calibration:
        notes.append(f"{len(gpu_traces)} nsys/Kineto traces not used: only calibration runs' are")
    return TraceRun(folder, s, label, k, calibration, options.get("engine_version", ""),
                    options.get("ranges"), jsonl, gpu_traces, tuple(iterations), tuple(notes))


def _validate_table(folder: Path, table: Any) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise _bad(folder, "validate", "must be a table", "write [validate] with calibration = true/false")
    for key, value in table.items():
        kind = VALIDATE_KEYS.get(key)
        if kind is None:
            raise _bad(folder, f"validate.{key}", "unknown key", f"use {', '.join(VALIDATE_KEYS)}")
        if not isinstance(value, kind):
            what, example = ("true or false", "true") if kind is bool else ("a string", '"minedraft"')
            raise _bad(folder, f"validate.{key}", f"must be {what}", f"write e.g. {key} = {example}")
    if table.get("ranges", "minedraft") not in RANGE_PRESETS:   # absent: calibrate detects it
        raise _bad(folder, "validate.ranges", f"unknown range preset {table['ranges']!r}",
                   f"use one of {', '.join(RANGE_PRESETS)}")
    return dict(table)


def _scenario(folder: Path, doc: dict[str, Any]) -> Scenario:
    """The manifest's scenario: paths relative to its folder, named after the folder unless it
    names itself; its errors name the manifest."""
    def resolve(table: dict[str, Any]) -> dict[str, Any]:
        return {key: (str(resolved_path_field(key, folder / value)) if key in PATH_FIELDS
                      and isinstance(value, str) and value else resolve(value) if isinstance(value, dict)
                      else value)
                for key, value in table.items()}

    try:
        values = resolve(doc)
        if "name" not in values and "name" not in values.get("run", {}):
            values["name"] = folder.name
        return scenario_from_mapping(values, str(folder / MANIFEST))
    except ScenarioError as exc:
        raise _bad(folder, exc.field, exc.problem, exc.fix) from None


def _spec(step: dict[str, Any]) -> bool:
    return step.get("verify_len") is not None or step.get("measured_draft_time") is not None


def _check_k(folder: Path, s: Scenario, sourced: Sequence[tuple[Path, Iteration]]) -> int | None:
    """k from the speculative steps' proposed_len (one value in the folder); None for AR."""
    seen: dict[int, str] = {}
    for p, it in sourced:
        for step in it.steps:
            k = step.get("proposed_len")
            if _spec(step) and isinstance(k, int) and k > 0:
                seen.setdefault(k, f"{p.name} line {step['_line']}")
    if len(seen) > 1:
        where = ", ".join(f"k = {k} in {w}" for k, w in sorted(seen.items()))
        raise ScenarioError("--traces", f"{folder} holds traces of two different k ({where})",
                            "keep one run per folder")
    if s.method == "ar":
        if seen:
            raise _bad(folder, "method", f"ar, but its traces draft k = {next(iter(seen))} tokens a step",
                       f"set the run's method ({', '.join(m for m in LABEL if m != 'ar')})")
        return None
    if not seen:
        raise _bad(folder, "method", f"{s.method}, but its traces hold no speculative step",
                   "set method = \"ar\" if the run did not speculate")
    (k,) = seen
    if s.method == "psd+tetris":
        # TETRIS drafts k + e per request (proposed_len) and scores the best k x m of them in a
        # full sub-batch (verify_len): the traces name k + e, the manifest's k sets the budget.
        if k != s.k + s.extra:
            fix = f"set extra = {k - s.k}" if k > s.k else f"set k and extra so that k + extra = {k}"
            raise _bad(folder, "extra", f"the manifest drafts k + extra = {s.k} + {s.extra} = "
                       f"{s.k + s.extra} tokens per request, its traces propose {k}", fix)
        return s.k
    if k != s.k:
        fix = (f"set k = {k}" if 1 <= k <= MAX_K else
               f"the traces' proposed_len of {k} is past the k a run may have ({MAX_K}): check them")
        raise _bad(folder, "k", f"the manifest says {s.k}, its traces propose {k} tokens per request", fix)
    return k


def _at(path: Path, rec: dict[str, Any]) -> str:
    """A record's place for messages: the user's trace, its line and the record's tid."""
    tid = rec.get("tid")
    return f"{path} line {rec['_line']}" + (f" ({tid})" if isinstance(tid, str) else "")


def _check_records(path: Path, it: Iteration) -> None:
    """The record fields validation computes with and calibration/minedraft.py does not check (it
    reads steps only as timings): a bad value named at its line here, not a traceback, a NaN in
    the report or an error naming the simulator's temporary request file later."""
    for st in it.steps:
        for key in ("batched_requests", "preempted_requests"):
            ids = st.get(key)
            if ids is not None and not (isinstance(ids, list) and all(isinstance(x, str | int) for x in ids)):
                raise TraceError(_at(path, st), f"{key} is a {type(ids).__name__}, not a list of request ids",
                                 RECORD_FIX)
        flag = st.get("is_prompt_run")
        if flag is not None and not isinstance(flag, bool) and finite(flag) is None:
            raise TraceError(_at(path, st), f"is_prompt_run is {flag!r}, not a count of prefill groups "
                             "(0 for a decode step)", RECORD_FIX)
        accepted, verified = finite(st.get("accepted_num")), finite(st.get("verify_len"))
        if accepted is not None and verified is not None and accepted > verified:
            raise TraceError(_at(path, st), f"accepted_num {accepted:g} exceeds verify_len {verified:g} "
                             "(more drafts accepted than verified)", CORRUPT)
    # Steps without batched_requests scheduled nothing (calibration/minedraft.py drops them):
    # without a decode step that ran a request, for some time, there is no throughput, VSR or
    # spread to measure (the report would hold NaN or nothing).
    decode = [st for st in it.steps if st.get("batched_requests") and not st.get("is_prompt_run")]
    bundle = f"{path} line {it.bundle}" if it.bundle else path
    if not decode:
        raise TraceError(bundle, "no decode step (is_prompt_run 0) ran a request (batched_requests)",
                         "give the trace of a run that decoded, with each step's batched_requests")
    if not any(st["end_us"] > st["start_us"] for st in decode):
        raise TraceError(bundle, "every decode step took no time (end_us = start_us)", CORRUPT)
    decoding = _decode_time_us(decode)
    for r in it.requests:
        if r.get("start_us") is None:
            raise TraceError(_at(path, r), "request record has no start_us", RECORD_FIX)
        for key in ("start_us", "end_us", "prompt_len", "gen_len"):
            if r.get(key) is not None and finite(r[key]) is None:
                raise TraceError(_at(path, r), f"{key} is {r[key]!r}, not a finite number", RECORD_FIX)
        for key in ("prompt_len", "gen_len"):
            count = finite(r.get(key))
            if count is not None and (count < 1 or not count.is_integer()):
                raise TraceError(_at(path, r), f"{key} is {r[key]!r}, not a whole number of tokens >= 1",
                                 CORRUPT)
        if r.get("end_us") is not None and r["end_us"] < r["start_us"]:
            raise TraceError(_at(path, r), f"the request ends before it starts (end_us {r['end_us']:g} < "
                             f"start_us {r['start_us']:g})", CORRUPT)
        if r.get("end_us") is not None and r["end_us"] == r["start_us"]:
            # A finished request ran at least its prefill step, and decode steps took time: its
            # latency of 0 would enter the measured E2EL and percentiles.
            raise TraceError(_at(path, r), "the request took no time (end_us = start_us = "
                             f"{r['start_us']:g}) while the run's steps took time", CORRUPT)
        _check_request_span(path, r, decoding)


def _decode_time_us(decode: Sequence[dict[str, Any]]) -> dict[Any, float]:
    """Each request's time in the decode steps that ran it (its id in their batched_requests):
    the length of the union of those steps' spans, so that steps overlapping in time (PSD's two
    processes) count once."""
    spans: dict[Any, list[tuple[float, float]]] = {}
    for st in decode:
        for tid in st["batched_requests"]:
            spans.setdefault(tid, []).append((st["start_us"], st["end_us"]))
    return {tid: _covered(own) for tid, own in spans.items()}


def _covered(spans: list[tuple[float, float]]) -> float:
    """The length of the union of the intervals `spans`."""
    total, reach = 0.0, -np.inf
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def _check_request_span(path: Path, r: dict[str, Any], decoding: dict[Any, float]) -> None:
    """A request lasts from its arrival to its last token, so at least as long as the decode
    steps that ran it: one shorter (a request of 1 us) would enter the measured latency and E2EL
    as a figure no run can have, and every prediction's error against it would be vast."""
    tid = r.get("tid")
    ran = decoding.get(tid, 0.0) if isinstance(tid, str | int) else 0.0
    if r.get("end_us") is not None and r["end_us"] - r["start_us"] < ran:
        raise TraceError(_at(path, r), f"the request lasted {r['end_us'] - r['start_us']:g} us (end_us - "
                         f"start_us) but the decode steps that ran it took {ran:g} us", CORRUPT)


def _check_iteration(folder: Path, s: Scenario, it: Iteration, where: str) -> None:
    """The manifest's m, requests, n, lengths and arrivals against one iteration's records."""
    cap = 2 * s.m if s.method in TWO_M else s.m
    widest = max((len(st.get("batched_requests") or ()) for st in it.steps), default=0)
    if widest > cap:
        fix = ("set m to half the run's max_num_seqs (sd-2m runs 2m)" if s.method == "sd-2m"
               else "set m to the run's max_num_seqs (--max-num-seqs)")
        raise _bad(folder, "m", f"the manifest says {s.m}, which allows {cap} requests a step, but {where} "
                   f"batches {widest}", fix)
    reqs = it.requests
    listed = scenario_trace(s)
    prompts = min(s.requests, len(listed.prompt_len)) if listed is not None else s.requests
    if len(reqs) != prompts * s.n:
        raise _bad(folder, "requests", f"the manifest asks {prompts} prompts x n = {s.n}, {where} has "
                   f"{len(reqs)} request records", "set requests (and n) to what the run served")
    for r in reqs:
        if r.get("end_us") is None or r.get("prompt_len") is None or r.get("gen_len") is None:
            raise ScenarioError("--traces", f"{folder}: {where}: request {r.get('tid')} never finished "
                                "(no end_us, prompt_len, gen_len)", "give traces of runs that completed")
    first_step = min((st["start_us"] for st in it.steps if st.get("batched_requests")), default=np.inf)
    for j, r in enumerate(reqs):
        tid, prompt, gen = r.get("tid"), int(r["prompt_len"]), int(r["gen_len"])
        arrival = _arrival(r, reqs, first_step)
        if listed is not None:
            want_p, want_o, want_a = (int(listed.prompt_len[j // s.n]), int(listed.output_len[j // s.n]),
                                      float(listed.arrival_s[j // s.n]))
            if prompt != want_p:
                raise _bad(folder, "trace", f"request {j} of the request list has {want_p} prompt tokens, "
                           f"{where}'s {tid} has {prompt}", "give the run's own request list")
            if abs(arrival - want_a) > ARRIVAL_TOLERANCE_S:
                raise _bad(folder, "trace", f"request {j} of the request list arrives at {want_a:g} s, "
                           f"{where}'s {tid} at {arrival:g} s", "give the run's own request list")
        else:
            want_o = s.output_len
            if s.prompt_len and prompt != s.prompt_len:
                raise _bad(folder, "prompt_len", f"the manifest says {s.prompt_len}, {where}'s {tid} has "
                           f"{prompt} prompt tokens", "set prompt_len = 0 (a dataset's lengths) or the run's")
            if s.rate is None and arrival > 0:
                raise _bad(folder, "rate", f"the manifest describes an offline run (no rate, no request "
                           f"list), but {where}'s {tid} arrived {arrival:.3g} s after the first step began",
                           "give the run's request list in trace")
        if prompt + gen > s.max_model_len:   # else the simulator refuses its own request file
            raise _bad(folder, "max_model_len", f"the manifest says {s.max_model_len}, {where}'s {tid} has "
                       f"{prompt} prompt + {gen} output tokens",
                       f"set max_model_len to the run's (at least {prompt + gen})")
        if gen > want_o:
            raise _bad(folder, "output_len", f"{want_o} tokens allowed, {where}'s {tid} generated {gen}",
                       "set output_len to the run's --output-len")


def _arrival(r: dict[str, Any], reqs: Sequence[dict[str, Any]], first_step: float) -> float:
    """Seconds from the first arrival; 0 for a request there before the first step (offline)."""
    if r["start_us"] <= first_step:
        return 0.0
    return (r["start_us"] - min(q["start_us"] for q in reqs)) * US


# ---------------------------------------------------------------------------------------------
# What a run measured


def measured_summary(it: Iteration, s: Scenario) -> dict[str, Any]:
    """One iteration's metrics under the simulator's names (see the module docstring)."""
    ran = [st for st in it.steps if st.get("batched_requests")]
    decode = [st for st in ran if not st.get("is_prompt_run")]
    dur = np.array([(st["end_us"] - st["start_us"]) * US for st in decode])
    generated = np.array([_generated(st) for st in decode], dtype=float)
    reqs = it.requests
    start = np.array([r["start_us"] * US for r in reqs])
    end = np.array([r["end_us"] * US for r in reqs])
    first = np.array([_first_token(r, ran) for r in reqs])
    gen = np.array([r["gen_len"] for r in reqs], dtype=float)
    makespan = float(end.max() - start.min())
    prompts = len(reqs) // s.n
    latency = (end - start).reshape(-1, s.n).max(axis=1)
    ttft = np.fmin.reduce((first - start).reshape(-1, s.n), axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(gen > 1, (end - first) / (gen - 1), np.nan)
    speculative = s.method != "ar"
    return {
        "method": s.method, "k": s.k if speculative else None, "m": s.m,
        "requests": prompts, "sequences": len(reqs), "makespan_s": makespan,
        "throughput_tok_s": step_throughput(generated, dur, 1.0),
        "throughput_tok_s_trim80": step_throughput(generated, dur, 0.8),
        "throughput_tok_s_trim70": step_throughput(generated, dur, 0.7),
        "output_tok_s": ratio(gen.sum(), makespan),
        "e2el_ms": makespan / prompts * 1e3,
        "latency_ms": ms_stats(latency), "ttft_ms": ms_stats(ttft), "tpot_ms": ms_stats(tpot),
        "vsr": (ratio(sum(st.get("accepted_num") or 0 for st in decode),
                      sum(st.get("verify_len") or 0 for st in decode)) if speculative else None),
        "parallelization_rate": (ratio(sum(bool(st.get("is_parallelised")) for st in decode), len(decode))
                                 if speculative else None),
        "decode_steps": len(decode), "prefill_steps": len(ran) - len(decode),
        "preemptions": sum(len(st.get("preempted_requests") or ()) for st in it.steps),
    }


def _generated(step: dict[str, Any]) -> float:
    for key in ("generated_num", "psdsim_kept_num"):
        if isinstance(step.get(key), int | float):
            return float(step[key])
    return float(len(step["batched_requests"]))


def _first_token(r: dict[str, Any], ran: Sequence[dict[str, Any]]) -> float:
    """psdsim's own first-token time, else the end of the first prompt step that ran the
    request (MineDraft's analyze_traces.py)."""
    if isinstance(r.get("psdsim_first_token_us"), int | float):
        return r["psdsim_first_token_us"] * US
    for st in ran:
        if st.get("is_prompt_run") and r.get("tid") in st["batched_requests"]:
            return st["end_us"] * US
    return float("nan")


def prediction_requests(it: Iteration, s: Scenario) -> str:
    """The iteration's requests as the simulator's request trace: one line per prompt (its first
    sample's prompt and arrival, its samples' longest output)."""
    reqs = it.requests
    first_step = min((st["start_us"] for st in it.steps if st.get("batched_requests")), default=np.inf)
    groups = [reqs[i:i + s.n] for i in range(0, len(reqs), s.n)]
    return requests_jsonl([int(g[0]["prompt_len"]) for g in groups],
                          [max(int(r["gen_len"]) for r in g) for g in groups],
                          [_arrival(g[0], reqs, first_step) for g in groups])


# ---------------------------------------------------------------------------------------------
# The validation


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
    named by sim/profile.py's source warnings)."""
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
                raise _bad(folder, "acceptance", *_no_acceptance(k, named)) from None
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

