"""A recorded real run's folder (`psdsim validate --traces RUN_DIR…`), read, and each claim of its
manifest checked against its traces.

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
fields the metrics are computed from are checked (record_checks.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from psdsim.calibration.calibrate import detect_format
from psdsim.calibration.minedraft_records import Iteration, read_minedraft_iterations
from psdsim.calibration.ranges import PRESETS as RANGE_PRESETS
from psdsim.engine.validate.describe import SIM_METHOD
from psdsim.engine.validate.measured import arrival_s
from psdsim.engine.validate.record_checks import check_records
from psdsim.engine.validate.reference import CALIBRATION_LABELS
from psdsim.sim.errors import ScenarioError
from psdsim.sim.input_paths import input_file, input_folder, input_path
from psdsim.sim.scenario import (
    MAX_K,
    PATH_FIELDS,
    Scenario,
    read_toml,
    resolved_path_field,
    scenario_from_mapping,
)
from psdsim.sim.trace_replay import scenario_trace

MANIFEST = "manifest.toml"
VALIDATE_KEYS = {"calibration": bool, "engine_version": str, "ranges": str}
# Methods the reference engine does not run, validated from real traces only: their label is
# the simulator's method (report.py's sim_method falls back to the label).
TRACE_ONLY_PROFILE = {"sd-2m": "profile-one-process.json", "psd+tetris": "profile.json"}
LABEL = {**{sim: label for label, sim in SIM_METHOD.items()},    # simulator method -> run label
         **{method: method for method in TRACE_ONLY_PROFILE}}
# Methods whose steps batch up to 2m requests: MineDraft's two sub-batches of m (its
# --max-num-seqs m means 2m running, docs/reference/paper.md §4.2), and sd-2m's 2m by definition.
TWO_M = ("psd", "psd+tetris", "sd-2m")
ARRIVAL_TOLERANCE_S = 0.1   # a request list's arrival against the traced one (the engine adds each late)


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


def manifest_error(run: Path, field: str, problem: str, fix: str) -> ScenarioError:
    """The error naming `field` of the manifest of the run folder `run`."""
    return ScenarioError(f"{run / MANIFEST}: {field}", problem, fix)


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
        raise manifest_error(folder, "method", f"{s.method} runs cannot be validated from traces yet",
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
        check_records(p, it)
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
        raise manifest_error(folder, "validate", "must be a table",
                             "write [validate] with calibration = true/false")
    for key, value in table.items():
        kind = VALIDATE_KEYS.get(key)
        if kind is None:
            raise manifest_error(folder, f"validate.{key}", "unknown key", f"use {', '.join(VALIDATE_KEYS)}")
        if not isinstance(value, kind):
            what, example = ("true or false", "true") if kind is bool else ("a string", '"minedraft"')
            raise manifest_error(folder, f"validate.{key}", f"must be {what}",
                                 f"write e.g. {key} = {example}")
    if table.get("ranges", "minedraft") not in RANGE_PRESETS:   # absent: calibrate detects it
        raise manifest_error(folder, "validate.ranges", f"unknown range preset {table['ranges']!r}",
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
        raise manifest_error(folder, exc.field, exc.problem, exc.fix) from None


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
            raise manifest_error(folder, "method",
                                 f"ar, but its traces draft k = {next(iter(seen))} tokens a step",
                                 f"set the run's method ({', '.join(m for m in LABEL if m != 'ar')})")
        return None
    if not seen:
        raise manifest_error(folder, "method", f"{s.method}, but its traces hold no speculative step",
                             "set method = \"ar\" if the run did not speculate")
    (k,) = seen
    if s.method == "psd+tetris":
        # TETRIS drafts k + e per request (proposed_len) and scores the best k x m of them in a
        # full sub-batch (verify_len): the traces name k + e, the manifest's k sets the budget.
        if k != s.k + s.extra:
            fix = f"set extra = {k - s.k}" if k > s.k else f"set k and extra so that k + extra = {k}"
            raise manifest_error(folder, "extra", f"the manifest drafts k + extra = {s.k} + {s.extra} = "
                                 f"{s.k + s.extra} tokens per request, its traces propose {k}", fix)
        return s.k
    if k != s.k:
        fix = (f"set k = {k}" if 1 <= k <= MAX_K else
               f"the traces' proposed_len of {k} is past the k a run may have ({MAX_K}): check them")
        raise manifest_error(folder, "k", f"the manifest says {s.k}, its traces propose {k} tokens per "
                             "request", fix)
    return k


def _check_iteration(folder: Path, s: Scenario, it: Iteration, where: str) -> None:
    """The manifest's m, requests, n, lengths and arrivals against one iteration's records."""
    cap = 2 * s.m if s.method in TWO_M else s.m
    widest = max((len(step.get("batched_requests") or ()) for step in it.steps), default=0)
    if widest > cap:
        fix = ("set m to half the run's max_num_seqs (sd-2m runs 2m)" if s.method == "sd-2m"
               else "set m to the run's max_num_seqs (--max-num-seqs)")
        raise manifest_error(folder, "m", f"the manifest says {s.m}, which allows {cap} requests a step, "
                             f"but {where} batches {widest}", fix)
    reqs = it.requests
    listed = scenario_trace(s)
    prompts = min(s.requests, len(listed.prompt_len)) if listed is not None else s.requests
    if len(reqs) != prompts * s.n:
        raise manifest_error(folder, "requests", f"the manifest asks {prompts} prompts x n = {s.n}, "
                             f"{where} has {len(reqs)} request records",
                             "set requests (and n) to what the run served")
    for r in reqs:
        if r.get("end_us") is None or r.get("prompt_len") is None or r.get("gen_len") is None:
            raise ScenarioError("--traces", f"{folder}: {where}: request {r.get('tid')} never finished "
                                "(no end_us, prompt_len, gen_len)", "give traces of runs that completed")
    first_step = min((step["start_us"] for step in it.steps if step.get("batched_requests")), default=np.inf)
    for j, r in enumerate(reqs):
        tid, prompt, gen = r.get("tid"), int(r["prompt_len"]), int(r["gen_len"])
        arrival = arrival_s(r, reqs, first_step)
        if listed is not None:
            want_p, want_o, want_a = (int(listed.prompt_len[j // s.n]), int(listed.output_len[j // s.n]),
                                      float(listed.arrival_s[j // s.n]))
            if prompt != want_p:
                raise manifest_error(folder, "trace", f"request {j} of the request list has {want_p} prompt "
                                     f"tokens, {where}'s {tid} has {prompt}",
                                     "give the run's own request list")
            if abs(arrival - want_a) > ARRIVAL_TOLERANCE_S:
                raise manifest_error(folder, "trace", f"request {j} of the request list arrives at "
                                     f"{want_a:g} s, {where}'s {tid} at {arrival:g} s",
                                     "give the run's own request list")
        else:
            want_o = s.output_len
            if s.prompt_len and prompt != s.prompt_len:
                raise manifest_error(folder, "prompt_len", f"the manifest says {s.prompt_len}, {where}'s "
                                     f"{tid} has {prompt} prompt tokens",
                                     "set prompt_len = 0 (a dataset's lengths) or the run's")
            if s.rate is None and arrival > 0:
                raise manifest_error(folder, "rate", f"the manifest describes an offline run (no rate, no "
                                     f"request list), but {where}'s {tid} arrived {arrival:.3g} s after the "
                                     "first step began",
                                     "give the run's request list in trace")
        if prompt + gen > s.max_model_len:   # else the simulator refuses its own request file
            raise manifest_error(folder, "max_model_len", f"the manifest says {s.max_model_len}, {where}'s "
                                 f"{tid} has {prompt} prompt + {gen} output tokens",
                                 f"set max_model_len to the run's (at least {prompt + gen})")
        if gen > want_o:
            raise manifest_error(folder, "output_len",
                                 f"{want_o} tokens allowed, {where}'s {tid} generated {gen}",
                                 "set output_len to the run's --output-len")
