"""MineDraft's own step trace (`minedraft/benchmarks/trace.py`, JSONL) → step samples.

What the file holds [CODE: MineDraft's trace.py, plugin/engine/llm_engine.py,
plugin/core/scheduler.py, plugin/spec_decode/spec_decode_worker.py, benchmarks/trace/analyze_traces.py]:

- Each line is one *bundle*, `{"metadata": {...}, "traces": [...]}`: one benchmark iteration (the
  tracer appends a bundle per export; warm-up iterations come first). Every trace carries
  `tid` ("Step:17", "Request:3") and `type` ("Step" or "Request"); fields that were never set
  (None) are left out of the JSON. Trace ids restart in every bundle. A file of bare records,
  one JSON object per line, is read too: a record is a step if `type` says so or it has step
  fields, a request if it has `prompt_len`/`gen_len`.
- Step: one `LLMEngine.step()`. `start_us`/`end_us` bracket the whole engine step (scheduling and
  output processing included), `batch_start_us`/`batch_end_us` the worker's `execute_model`, all
  `time.perf_counter()` µs. `is_prompt_run` is the step's number of prefill groups (0 for decode).
  `batched_requests` lists the request tids of every scheduled group: under PSD that is *both*
  sub-batches, the verified one and the one being drafted. Steps that scheduled nothing have no
  `is_prompt_run` and no `batched_requests`; they are dropped.
- `proposed_len` is the per-request proposal length of the step (num_lookahead_slots, less
  TETRIS's extra proposals when TETRIS is on), not a batch total. `verify_len` is the batch total
  Σ proposal_lens of the verified requests (after TETRIS selection). `accepted_num` is accepted
  *draft* tokens (non-negative outputs minus one per speculating request); `generated_num` is
  every emitted token (bonus / recovered / non-speculative tokens included).
- [INFERRED] so the verified batch is `generated_num − accepted_num` (each verified request emits
  exactly one token beyond its accepted drafts); under PSD that is the sending sub-batch, about half
  of `batched_requests`. Where that difference is not in (0, len(batched_requests)] the batch is
  left NaN and a note says so.
- `measured_*_time` are `time.perf_counter()` differences around `torch.cuda.synchronize()`, i.e.
  seconds in MineDraft's code (the dataclass annotates them `int`). The unit is still inferred per
  file [INFERRED]: of s, ms and µs, the one that makes the median per-step sum draft + target +
  overhead closest to the median step wall time (`end_us − start_us`) while not above 1.5× it and
  not below 1% of it (so at most one unit fits). None fits → TraceError. The choice is in the notes.

What each timer covers [CODE], and so what the samples mean:

- Spec-decode step, `verify` sample ← `measured_target_time`. Plain SD: the target's scoring pass.
  PSD (`ParallelSpecDecodeWorker`): start scoring (async broadcast) + *drafting of the other
  sub-batch* on the driver + waiting for the scores, i.e. the overlapped draft ∥ verify region,
  an upper bound on the target pass. batch = verified requests, tokens = verify_len + batch
  (every request scores its proposals + 1), k = verify_len / batch (mean verified proposals per
  request; proposed_len without TETRIS), accepted = accepted_num, generated = generated_num.
- `draft` sample ← `measured_draft_time`, only for steps that are not `is_parallelised` (plain SD,
  and PSD's init step, where the sending batch is drafted synchronously): batch = verified
  requests, k = proposed_len. [CODE] In an `is_parallelised` step that timer covers only fetching
  the previous step's proposals (the drafting ran inside `measured_target_time`), so those draft
  samples are dropped with a reason. With TETRIS the drafter runs k + e passes; e is not in the
  record.
- `overhead` sample ← `measured_overhead_time` (PSD: batch preparation and split, rejection
  sampling, output lists; SD: rejection sampling and output lists). batch = scheduled requests.
- Prompt step (`is_prompt_run`), `prefill` sample ← `measured_target_time`: the target's prefill
  and the draft model's prefill of the same prompts (both run inside the timer). batch = prompts,
  tokens = `batched_token_num` where present, else Σ prompt_len of the batched requests (request
  records of the same bundle), else NaN; pairs = Σ prompt_len²/2 and ctx = 0 when the prompt lengths
  are known and all their tokens were computed (no chunked prefill, no prefix-cache hit). MineDraft
  does not time overhead in prompt steps; an overhead sample is made only where the field exists.
- A decode step that ran without speculation (no draft fields; speculation disabled) gives a
  `verify` sample with k = 0 and tokens = batch = scheduled requests.
- Every sample spans its step: start_s/end_s are the step's start_us/end_us in seconds since the
  first record's start_us; duration_s = span_s = the measured time.
- Warm-up: MineDraft's file names say `…_warmup=N_runs=…`; the first N bundles of such a file are
  warm-up iterations and their steps are dropped (counted in `dropped`).

Joining an nsys export (`join_step_attributes`) [INFERRED alignment rule]: MineDraft's NVTX ranges
carry no batch facts, so samples read with the `minedraft` range preset get them from the step
records by order, kind by kind (and process by process, where ranks were not merged):
- `score` (verify) and `_verify_tokens` (reject) ↔ the spec-decode steps, in order;
- `_run_no_spec` (draft_prefill: the range is on the driver) ↔ the prompt steps and the
  no-speculation decode steps, in order
  (the latter keep NaN attributes: they are decode passes, not prefills);
- `propose` (draft) ↔ per spec-decode step: the sending batch when the step is not parallelised
  (batch = verified requests), then the other sub-batch when it is non-empty (batch = scheduled −
  verified); k = proposed_len. PEARL's and plain SD's drafting carry no `propose` range.
Steps that scheduled nothing run no worker code and take part in no join. The common prefix is
joined; the notes say how many samples or step phases were left over.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np

from psdsim.calibration.phases import Built, TraceInfo
from psdsim.calibration.samples import NAN, StepSample
from psdsim.calibration.trace_error import TraceError
from psdsim.sim.numbers import finite

US = 1e-6
UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6))
MAX_RATIO = 1.5    # measured times may exceed the step wall time by this much (timer jitter)
MIN_RATIO = 0.01   # ... and must cover at least this share of it, so that at most one unit fits
MEASURED = ("measured_draft_time", "measured_target_time", "measured_overhead_time")
# Fields only a step record has (is_parallelised is always written: it defaults to False).
STEP_KEYS = frozenset({"is_prompt_run", "batched_requests", "preempted_requests", "batch_start_us",
                       "batch_end_us", "is_parallelised", "proposed_len", "verify_len", "accepted_num",
                       "generated_num", *MEASURED})
REQUEST_KEYS = frozenset({"prompt_len", "gen_len"})
# Fields a step that took the speculative path must have (the others are timed in every step).
SPEC_FIELDS = ("measured_draft_time", "measured_overhead_time", "proposed_len", "verify_len",
               "accepted_num", "generated_num")
COUNTS = ("proposed_len", "verify_len", "accepted_num", "generated_num", "batched_token_num")
WARMUP = re.compile(r"_warmup=(\d+)")
CORRUPT = "the record is corrupt: re-record the trace"
RECORD_FIX = "the file should be MineDraft's trace (benchmarks/trace/*.jsonl, written by TRACER.export)"


@dataclass
class _Record:
    data: dict[str, Any]
    line: int
    bundle: int          # the line of its bundle; 0 for bare records
    where: str           # "line 7" or "line 7 (Step:12)", for messages


@dataclass
class _Trace:
    path: Path
    steps: list[_Record] = field(default_factory=list)
    requests: list[_Record] = field(default_factory=list)
    bundles: list[int] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)


# ---------------------------------------------------------------------------------------------
# Reading and checking


def _record_kind(rec: dict[str, Any]) -> str | None:
    kind = rec.get("type")
    if kind == "Step":
        return "step"
    if kind == "Request":
        return "request"
    if kind is not None:
        return None
    if STEP_KEYS & rec.keys():
        return "step"
    if REQUEST_KEYS & rec.keys():
        return "request"
    return None


def _number(path: Path, rec: _Record, key: str) -> float | None:
    value = rec.data.get(key)
    if value is None:
        return None
    number = finite(value)   # a time or a count: a boolean is no number here
    if number is not None:
        return number
    raise TraceError(f"{path} {rec.where}", f"{key} is {value!r}, not a finite number", RECORD_FIX)


def _check_step(path: Path, rec: _Record) -> None:
    """Raise for a step record that cannot be used: missing fields, non-numbers, negative times."""
    for key in ("start_us", "end_us"):
        if _number(path, rec, key) is None:
            raise TraceError(f"{path} {rec.where}", f"step record has no {key}", RECORD_FIX)
    if rec.data["end_us"] < rec.data["start_us"]:
        raise TraceError(f"{path} {rec.where}", f"negative step duration (end_us {rec.data['end_us']} "
                         f"< start_us {rec.data['start_us']})", CORRUPT)
    for key in (*MEASURED, *COUNTS, "batch_start_us", "batch_end_us"):
        value = _number(path, rec, key)
        if value is not None and value < 0:
            what = "duration" if key in MEASURED else "count" if key in COUNTS else "time"
            raise TraceError(f"{path} {rec.where}", f"negative {what} {key} = {value:g}", CORRUPT)
    if _role(rec.data) == "empty":
        return
    for key in ("is_prompt_run", "measured_target_time"):
        if rec.data.get(key) is None:
            fix = ("record with MineDraft's timer on (execute_model(profile_time=True))"
                   if key.startswith("measured") else RECORD_FIX)
            raise TraceError(f"{path} {rec.where}", f"step record has no {key}", fix)
    if _role(rec.data) == "spec":
        for key in SPEC_FIELDS:
            if rec.data.get(key) is None:
                raise TraceError(f"{path} {rec.where}", f"speculative step record has no {key}", RECORD_FIX)


def _load(path: str | Path) -> _Trace:
    path = Path(path)
    trace = _Trace(path)
    seen_line = False
    try:
        with path.open(encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                seen_line = True
                try:
                    obj = json.loads(line)
                except (ValueError, RecursionError) as exc:  # JSONDecodeError, a 5000-digit number
                    why = (f"{exc.msg} at column {exc.colno}" if isinstance(exc, json.JSONDecodeError)
                           else " ".join(str(exc).split()[:12]))
                    raise TraceError(f"{path} line {n}", f"not JSON ({why})",
                                     f"{RECORD_FIX}, one JSON object per line") from None
                if not isinstance(obj, dict):
                    raise TraceError(f"{path} line {n}", f"a JSON {type(obj).__name__}, not an object",
                                     f"{RECORD_FIX}, one JSON object per line")
                traces = obj.get("traces")
                if isinstance(traces, list):
                    trace.bundles.append(n)
                    for item in traces:
                        where = f"line {n}" + (f" ({item['tid']})" if isinstance(item, dict)
                                               and isinstance(item.get("tid"), str) else "")
                        _add(trace, item, n, n, where)
                else:
                    _add(trace, obj, n, 0, f"line {n}")
    except OSError as exc:
        raise TraceError(path, f"cannot read ({exc.strerror or exc})", "make the file readable") from None
    except UnicodeDecodeError:
        raise TraceError(path, "not a text file", RECORD_FIX) from None
    if not seen_line:
        raise TraceError(path, "empty file", RECORD_FIX)
    if not trace.steps:
        raise TraceError(path, "no step records (objects with start_us, end_us, is_prompt_run, …)",
                         RECORD_FIX)
    for rec in trace.steps:
        _check_step(path, rec)
    _attach_prompt_lens(trace)
    return trace


def _add(trace: _Trace, item: Any, line: int, bundle: int, where: str) -> None:
    kind = _record_kind(item) if isinstance(item, dict) else None
    if kind is None:
        trace.dropped["record that is neither a step nor a request"] += 1
        return
    rec = _Record(item, line, bundle, where)
    (trace.steps if kind == "step" else trace.requests).append(rec)


def _attach_prompt_lens(trace: _Trace) -> None:
    """Prompt steps get `_prompt_lens`: the prompt_len of each batched request, where every one is
    known (request records of the same bundle, matched by tid)."""
    prompt_len: dict[tuple[int, str], float] = {}
    for rec in trace.requests:
        tid, plen = rec.data.get("tid"), rec.data.get("prompt_len")
        if tid is not None and (length := finite(plen)) is not None:
            prompt_len[(rec.bundle, str(tid))] = length
    for rec in trace.steps:
        batched = rec.data.get("batched_requests")
        if not rec.data.get("is_prompt_run") or not isinstance(batched, list) or not batched:
            continue
        lens = [prompt_len.get((rec.bundle, str(tid))) for tid in batched]
        if all(v is not None for v in lens):
            rec.data["_prompt_lens"] = lens


# ---------------------------------------------------------------------------------------------
# What a step record says


def _num(value: Any) -> float:
    """A step field as a float: MineDraft writes flags as booleans (1/0); anything else that is
    not a finite number is NaN, which the reader treats as absent."""
    number = float(value) if isinstance(value, bool) else finite(value)
    return NAN if number is None else number


def _role(step: dict[str, Any]) -> str:
    """empty (nothing scheduled), prompt, spec (took the speculative path) or nospec (a decode step
    run without speculation)."""
    if step.get("verify_len") is not None or step.get("measured_draft_time") is not None:
        return "spec"
    if step.get("is_prompt_run") is None and step.get("batched_requests") is None \
            and step.get("measured_target_time") is None:
        return "empty"
    return "prompt" if step.get("is_prompt_run") else "nospec"


@dataclass(frozen=True)
class _Facts:
    role: str
    scheduled: float       # requests scheduled (under PSD both sub-batches)
    verified: float        # requests verified (the sending sub-batch)
    k: float               # proposed_len
    verify_len: float
    accepted: float
    generated: float
    parallelised: bool
    mixed: bool            # a speculative step that also carried prefills (chunked prefill)
    prompt_tokens: float
    pairs: float
    ctx: float


def _facts(step: dict[str, Any]) -> _Facts:
    role = _role(step)
    batched = step.get("batched_requests")
    scheduled = float(len(batched)) if isinstance(batched, list) else _num(batched)
    prompts = _num(step.get("is_prompt_run"))
    if math.isnan(scheduled) and role == "prompt" and not isinstance(step.get("is_prompt_run"), bool):
        scheduled = prompts
    accepted, generated = _num(step.get("accepted_num")), _num(step.get("generated_num"))
    verified = generated - accepted
    if not (verified > 0 and (math.isnan(scheduled) or verified <= scheduled)):
        verified = NAN
    tokens = pairs = ctx = NAN
    if role == "prompt":
        lens = step.get("_prompt_lens")
        total = float(sum(lens)) if lens else NAN
        tokens = _num(step.get("batched_token_num"))
        if math.isnan(tokens):
            tokens = total
        if lens and tokens == total:
            pairs, ctx = float(sum(x * x for x in lens) / 2), 0.0
        elif lens and tokens < total:
            ctx = total - tokens
    return _Facts(role, scheduled, verified, _num(step.get("proposed_len")), _num(step.get("verify_len")),
                  accepted, generated, bool(step.get("is_parallelised")),
                  role == "spec" and bool(step.get("is_prompt_run")), tokens, pairs, ctx)


def _verify_attrs(f: _Facts) -> dict[str, float]:
    if f.role == "nospec":
        return {"batch": f.scheduled, "tokens": f.scheduled, "k": 0.0}
    return {"batch": f.verified, "tokens": f.verify_len + f.verified, "k": f.verify_len / f.verified,
            "accepted": f.accepted, "generated": f.generated}


def _prefill_attrs(f: _Facts) -> dict[str, float]:
    return {"batch": f.scheduled, "tokens": f.prompt_tokens, "pairs": f.pairs, "ctx": f.ctx}


def _known(attrs: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in attrs.items() if not math.isnan(v)}


# ---------------------------------------------------------------------------------------------
# Public readers


def read_minedraft_steps(path: str | Path) -> list[dict[str, Any]]:
    """Every step record of the file in order (warm-up bundles included, as an nsys capture would
    be), as dicts, with `_line`, `_bundle` and, on prompt steps whose requests are known,
    `_prompt_lens` added."""
    trace = _load(path)
    return [{**rec.data, "_line": rec.line, "_bundle": rec.bundle} for rec in trace.steps]


def read_minedraft_requests(path: str | Path) -> list[dict[str, Any]]:
    """Every request record (start_us; end_us, prompt_len and gen_len once finished), with `_line`
    and `_bundle` added."""
    trace = _load(path)
    return [{**rec.data, "_line": rec.line, "_bundle": rec.bundle} for rec in trace.requests]


@dataclass(frozen=True)
class Iteration:
    """One measured benchmark iteration of a MineDraft trace: its step and request records (as
    read_minedraft_steps and read_minedraft_requests give them)."""

    bundle: int                      # the line of its bundle; 0 for a file of bare records
    steps: list[dict[str, Any]]
    requests: list[dict[str, Any]]


def read_minedraft_iterations(path: str | Path) -> tuple[list[Iteration], list[str]]:
    """The iterations a MineDraft trace measured, in order: one per bundle (TRACER.export runs
    once per `run_to_completion`), less the warm-up bundles its file name counts (a file of bare
    records is one iteration); and notes on what was left out."""
    trace = _load(path)
    notes: list[str] = []
    warm = _warmup_bundles(trace, notes)
    order = trace.bundles or [0]
    steps: dict[int, list[dict[str, Any]]] = {b: [] for b in order}
    requests: dict[int, list[dict[str, Any]]] = {b: [] for b in order}
    for recs, into in ((trace.steps, steps), (trace.requests, requests)):
        for rec in recs:
            into[rec.bundle].append({**rec.data, "_line": rec.line, "_bundle": rec.bundle})
    return [Iteration(b, steps[b], requests[b]) for b in order if b not in warm], notes


def _infer_unit(trace: _Trace) -> tuple[str, float, str]:
    sums, walls = [], []
    for rec in trace.steps:
        d = rec.data
        wall = (d["end_us"] - d["start_us"]) * US
        total = sum(_num(d.get(key)) for key in MEASURED if d.get(key) is not None)
        if _role(d) != "empty" and wall > 0 and total > 0:
            sums.append(total)
            walls.append(wall)
    if not sums:
        raise TraceError(trace.path, "no step has a positive measured_*_time and a positive wall time "
                         "(end_us − start_us)", "record with MineDraft's timer on")
    msum, mwall = median(sums), median(walls)
    fits = [(abs(math.log(msum * scale / mwall)), name, scale) for name, scale in UNITS
            if MIN_RATIO <= msum * scale / mwall <= MAX_RATIO]
    if not fits:
        raise TraceError(trace.path, "no time unit (s, ms, µs) fits measured_*_time: the median "
                         f"per-step sum draft + target + overhead is {msum:g} against a median step "
                         f"wall time of {mwall:g} s", "check that the fields are timings of these steps")
    _, name, scale = min(fits)
    note = (f"measured_*_time read as {name}: median draft + target + overhead {msum * scale * 1e3:.3g} ms "
            f"per step, {msum * scale / mwall:.0%} of the median step wall time {mwall * 1e3:.3g} ms")
    return name, scale, note


def _warmup_bundles(trace: _Trace, notes: list[str]) -> set[int]:
    m = WARMUP.search(trace.path.name)
    if not m or not trace.bundles:
        return set()
    n = int(m.group(1))
    if n == 0:
        return set()
    if n >= len(trace.bundles):
        notes.append(f"file name says warmup={n} but there are only {len(trace.bundles)} iterations; "
                     "kept them all")
        return set()
    notes.append(f"dropped the first {n} of {len(trace.bundles)} iterations: warm-up (file name warmup={n})")
    return set(trace.bundles[:n])


def read_minedraft(path: str | Path) -> tuple[Built, TraceInfo]:
    """Samples from a MineDraft JSONL step trace (see the module docstring for the field meanings)."""
    trace = _load(path)
    path = trace.path
    _, scale, unit_note = _infer_unit(trace)
    dropped: Counter[str] = Counter(trace.dropped)
    notes: list[str] = [unit_note]
    warm = _warmup_bundles(trace, notes)
    starts = [r.data["start_us"] for r in (*trace.steps, *trace.requests)
              if isinstance(r.data.get("start_us"), int | float)]
    t0 = min(starts)
    samples: list[StepSample] = []
    roles: Counter[str] = Counter()
    no_batch = parallelised = timed_apart = 0

    for rec in trace.steps:
        d = rec.data
        f = _facts(d)
        if f.role == "empty":
            dropped["step with nothing scheduled"] += 1
            continue
        if rec.bundle in warm:
            dropped["step in a warm-up iteration"] += 1
            continue
        if d["end_us"] == d["start_us"]:
            dropped["step with zero duration"] += 1
            continue
        roles[f.role] += 1
        start_s, end_s = (d["start_us"] - t0) * US, (d["end_us"] - t0) * US

        def add(kind: str, key: str, attrs: dict[str, float], mixed: bool = False,
                rec: _Record = rec, start_s: float = start_s, end_s: float = end_s) -> None:
            value = rec.data.get(key)
            if value is None:
                return
            seconds = float(value) * scale
            if seconds <= 0:
                dropped[f"{kind}: zero {key}"] += 1
                return
            samples.append(StepSample(kind, start_s, end_s, seconds, seconds, mixed=mixed,
                                      source=f"{path.name}:{rec.line}:{key}").with_attrs(_known(attrs)))

        if "psdsim_target_time" in d:   # psdsim's reference engine: every piece timed on its own
            timed_apart += 1
            for kind, seconds, attrs in _psdsim_parts(d, f):
                if seconds > 0:
                    samples.append(StepSample(kind, start_s, end_s, seconds, seconds,
                                              source=f"{path.name}:{rec.line}:psdsim_{kind}")
                                   .with_attrs(_known(attrs)))
            continue
        overhead = {"batch": f.scheduled}
        if f.role == "prompt":
            add("prefill", "measured_target_time", _prefill_attrs(f))
        else:
            add("verify", "measured_target_time", _verify_attrs(f), mixed=f.mixed)
        if f.role == "spec":
            no_batch += math.isnan(f.verified)
            parallelised += f.parallelised
            if f.parallelised:
                dropped["draft: parallelised step (measured_draft_time only fetches the previous step's "
                        "proposals; the drafting runs inside measured_target_time)"] += 1
            else:
                add("draft", "measured_draft_time", {"batch": f.verified, "k": f.k})
        add("overhead", "measured_overhead_time", overhead)

    requests = len(trace.requests)
    finished = sum(1 for r in trace.requests if r.data.get("end_us") is not None)
    iterations = f"{len(trace.bundles)} iterations (bundles)" if trace.bundles else "bare records"
    notes.append(f"{iterations}: {roles['prompt']} prompt steps, {roles['spec']} speculative decode steps "
                 f"({parallelised} parallelised), {roles['nospec']} decode steps without speculation; "
                 f"{requests} request records ({finished} finished)")
    if parallelised:
        notes.append("PSD/PEARL trace: verify samples time the target pass overlapped with drafting the "
                     "other sub-batch (an upper bound on the target pass); no draft samples from "
                     "parallelised steps")
    if timed_apart:
        notes.append(f"{timed_apart} steps carry psdsim's fields: their target pass, drafting, channel "
                     "and rejection sampling are timed apart")
    if roles["prompt"] and timed_apart < sum(roles.values()):
        notes.append("prefill samples include the draft model's prefill of the same prompts "
                     "(MineDraft times both together)")
    if no_batch:
        notes.append(f"{no_batch} speculative steps: generated_num − accepted_num is not a batch size "
                     "in (0, scheduled requests]; their verify/draft batch is NaN")
    preempted = sum(len(r.data["preempted_requests"]) for r in trace.steps
                    if isinstance(r.data.get("preempted_requests"), list))
    if preempted:
        notes.append(f"{preempted} preemptions recorded")
    samples.sort(key=lambda s: (s.start_s, s.kind))
    return Built(samples, dropped, notes), TraceInfo("minedraft")


def _psdsim_parts(d: dict[str, Any], f: _Facts) -> list[tuple[str, float, dict[str, float]]]:
    """The samples of a step record written by psdsim's reference engine (engine/reference/
    trace.py): the target pass alone, each drafting (before or overlapped with the pass), the
    channel both ways, rejection sampling and the rest of the step, each with its batch and
    context tokens."""
    def t(key: str) -> float:
        return _num(d.get(key, 0.0))

    tokens = _num(d.get("batched_token_num"))
    batch, ctx = _num(d.get("psdsim_verify_batch")), _num(d.get("psdsim_verify_context_tokens"))
    k = 0.0 if f.role == "nospec" else f.k   # a decode pass without speculation verifies no drafts
    parts: list[tuple[str, float, dict[str, float]]] = []
    if f.role == "prompt":
        draft_prefill = t("psdsim_draft_prefill_time")
        parts.append(("prefill", t("psdsim_target_time"), {"batch": batch, "tokens": tokens, "pairs": f.pairs,
                                                           "ctx": f.ctx}))
        parts.append(("draft_prefill", draft_prefill, {"tokens": tokens, "pairs": f.pairs, "ctx": f.ctx}))
    else:
        parts.append(("verify", t("psdsim_target_time"), {"batch": batch, "tokens": tokens, "ctx": ctx,
                                                          "k": k, "accepted": f.accepted}))
        for when in ("sync", "ahead"):
            parts.append(("draft", t(f"psdsim_draft_{when}_time"),
                          {"batch": _num(d.get(f"psdsim_draft_{when}_batch")), "k": k,
                           "ctx": _num(d.get(f"psdsim_draft_{when}_context_tokens"))}))
        parts.append(("reject", t("psdsim_reject_time"), {"positions": tokens}))
    parts.append(("broadcast", t("psdsim_send_time"), {"nbytes": _num(d.get("psdsim_send_bytes"))}))
    parts.append(("comm", t("psdsim_return_time"), {"nbytes": _num(d.get("psdsim_return_bytes"))}))
    parts.append(("overhead", t("measured_overhead_time") - t("psdsim_reject_time"), {"batch": f.scheduled}))
    return parts


# ---------------------------------------------------------------------------------------------
# Joining NVTX-range samples (nsys, `minedraft` preset) to the step records


def _expected(steps: list[dict[str, Any]]) -> dict[str, list[tuple[dict[str, float], dict[str, Any]]]]:
    """Per kind, the phases the steps ran in order: (attributes to fill, the step)."""
    out: dict[str, list[tuple[dict[str, float], dict[str, Any]]]] = defaultdict(list)
    for step in steps:
        f = _facts(step)
        if f.role == "prompt":
            out["draft_prefill"].append((_known(_prefill_attrs(f)), step))
        elif f.role == "nospec":
            out["draft_prefill"].append(({}, step))   # `_run_no_spec` ran a decode pass: nothing to give
        elif f.role == "spec":
            verify = _known(_verify_attrs(f))
            out["verify"].append((verify, step))
            reject = {k: v for k, v in verify.items() if k in ("batch", "k")}
            if "tokens" in verify:
                reject["positions"] = verify["tokens"]
            out["reject"].append((reject, step))
            if not f.parallelised:
                out["draft"].append((_known({"batch": f.verified, "k": f.k}), step))
            other = f.scheduled - f.verified
            if other > 0:
                out["draft"].append((_known({"batch": other, "k": f.k}), step))
    return out


def join_step_attributes(samples: list[StepSample], steps: list[dict[str, Any]]
                         ) -> tuple[list[StepSample], list[str]]:
    """Fill the NaN batch facts of NVTX-range samples from MineDraft step records, by order, kind by
    kind (process by process); never overwrite a value a sample has. Returns the samples in their
    input order and notes on what was joined and what was left over (see the module docstring for
    the [INFERRED] alignment rule)."""
    expected = _expected(steps)
    out = list(samples)
    notes: list[str] = []
    groups: dict[tuple[str, int], list[int]] = defaultdict(list)
    for i, s in enumerate(samples):
        groups[(s.kind, s.process)].append(i)
    multi = {kind for kind, _ in groups if sum(1 for k, _ in groups if k == kind) > 1}
    for (kind, process), idx in sorted(groups.items()):
        label = f"{kind} (process {process})" if kind in multi else kind
        phases = expected.get(kind)
        if phases is None:
            notes.append(f"{label}: {len(idx)} samples; the step records say nothing about this kind")
            continue
        idx.sort(key=lambda i: (samples[i].start_s, i))
        n = min(len(idx), len(phases))
        filled = 0
        for i, (attrs, _) in zip(idx[:n], phases[:n], strict=True):
            s = out[i]
            fill = {a: v for a, v in attrs.items() if math.isnan(getattr(s, a))}
            if fill:
                out[i] = s.with_attrs(fill)
                filled += 1
        msg = f"{label}: joined {n} samples to step records by order ({filled} gained attributes)"
        if len(idx) != len(phases):
            more = "samples" if len(idx) > len(phases) else "step phases"
            msg += (f"; counts disagree ({len(idx)} samples, {len(phases)} step phases): "
                    f"{abs(len(idx) - len(phases))} {more} left unjoined")
        corr = _correlation([samples[i].duration_s for i in idx[:n]],
                            [_num(step.get(_TIMER.get(kind, ""))) for _, step in phases[:n]])
        if corr is not None:
            msg += f"; durations vs. the records' {_TIMER[kind]} correlate r={corr:.2f}"
        notes.append(msg)
    for kind in sorted(set(expected) - {k for k, _ in groups}):
        notes.append(f"{kind}: {len(expected[kind])} step phases but no samples of that kind")
    return out, notes


# The step timer that brackets each joined kind's work, for the alignment check.
_TIMER = {"verify": "measured_target_time", "draft_prefill": "measured_target_time"}


def _correlation(a: list[float], b: list[float]) -> float | None:
    pairs = [(x, y) for x, y in zip(a, b, strict=True) if not (math.isnan(x) or math.isnan(y))]
    if len(pairs) < 5:
        return None
    x, y = np.array(pairs, dtype=float).T
    if x.std() == 0 or y.std() == 0:
        return None
    return float(np.corrcoef(x, y)[0, 1])
