"""MineDraft's own step trace (`minedraft/benchmarks/trace.py`, JSONL): reading it, checking each
record, and what a step record says (its role, batch and proposal facts).

The format field by field, what each of MineDraft's timers covers, and which readings are
inferred rather than read off MineDraft's code: docs/calibration.md, "MineDraft's step trace,
field by field". Turning records into step samples is `calibration/minedraft.py`; joining them to
an nsys export is `calibration/minedraft_join.py`.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psdsim.calibration.samples import NAN
from psdsim.calibration.trace_error import TraceError
from psdsim.sim.numbers import finite

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
class Record:
    data: dict[str, Any]
    line: int
    bundle: int          # the line of its bundle; 0 for bare records
    where: str           # "line 7" or "line 7 (Step:12)", for messages


@dataclass
class Trace:
    path: Path
    steps: list[Record] = field(default_factory=list)
    requests: list[Record] = field(default_factory=list)
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


def _number(path: Path, rec: Record, key: str) -> float | None:
    value = rec.data.get(key)
    if value is None:
        return None
    number = finite(value)   # a time or a count: a boolean is no number here
    if number is not None:
        return number
    raise TraceError(f"{path} {rec.where}", f"{key} is {value!r}, not a finite number", RECORD_FIX)


def _check_step(path: Path, rec: Record) -> None:
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
    if step_role(rec.data) == "empty":
        return
    for key in ("is_prompt_run", "measured_target_time"):
        if rec.data.get(key) is None:
            fix = ("record with MineDraft's timer on (execute_model(profile_time=True))"
                   if key.startswith("measured") else RECORD_FIX)
            raise TraceError(f"{path} {rec.where}", f"step record has no {key}", fix)
    if step_role(rec.data) == "spec":
        for key in SPEC_FIELDS:
            if rec.data.get(key) is None:
                raise TraceError(f"{path} {rec.where}", f"speculative step record has no {key}", RECORD_FIX)


def load_trace(path: str | Path) -> Trace:
    path = Path(path)
    trace = Trace(path)
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


def _add(trace: Trace, item: Any, line: int, bundle: int, where: str) -> None:
    kind = _record_kind(item) if isinstance(item, dict) else None
    if kind is None:
        trace.dropped["record that is neither a step nor a request"] += 1
        return
    rec = Record(item, line, bundle, where)
    (trace.steps if kind == "step" else trace.requests).append(rec)


def _attach_prompt_lens(trace: Trace) -> None:
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


def as_number(value: Any) -> float:
    """A step field as a float: MineDraft writes flags as booleans (1/0); anything else that is
    not a finite number is NaN, which the reader treats as absent."""
    number = float(value) if isinstance(value, bool) else finite(value)
    return NAN if number is None else number


def step_role(step: dict[str, Any]) -> str:
    """empty (nothing scheduled), prompt, spec (took the speculative path) or nospec (a decode step
    run without speculation)."""
    if step.get("verify_len") is not None or step.get("measured_draft_time") is not None:
        return "spec"
    if step.get("is_prompt_run") is None and step.get("batched_requests") is None \
            and step.get("measured_target_time") is None:
        return "empty"
    return "prompt" if step.get("is_prompt_run") else "nospec"


@dataclass(frozen=True)
class StepFacts:
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


def step_facts(step: dict[str, Any]) -> StepFacts:
    role = step_role(step)
    batched = step.get("batched_requests")
    scheduled = float(len(batched)) if isinstance(batched, list) else as_number(batched)
    prompts = as_number(step.get("is_prompt_run"))
    if math.isnan(scheduled) and role == "prompt" and not isinstance(step.get("is_prompt_run"), bool):
        scheduled = prompts
    accepted, generated = as_number(step.get("accepted_num")), as_number(step.get("generated_num"))
    verified = generated - accepted
    if not (verified > 0 and (math.isnan(scheduled) or verified <= scheduled)):
        verified = NAN
    tokens = pairs = ctx = NAN
    if role == "prompt":
        lens = step.get("_prompt_lens")
        total = float(sum(lens)) if lens else NAN
        tokens = as_number(step.get("batched_token_num"))
        if math.isnan(tokens):
            tokens = total
        if lens and tokens == total:
            pairs, ctx = float(sum(x * x for x in lens) / 2), 0.0
        elif lens and tokens < total:
            ctx = total - tokens
    return StepFacts(role, scheduled, verified, as_number(step.get("proposed_len")),
                     as_number(step.get("verify_len")), accepted, generated,
                     bool(step.get("is_parallelised")),
                     role == "spec" and bool(step.get("is_prompt_run")), tokens, pairs, ctx)


def verify_attrs(f: StepFacts) -> dict[str, float]:
    if f.role == "nospec":
        return {"batch": f.scheduled, "tokens": f.scheduled, "k": 0.0}
    return {"batch": f.verified, "tokens": f.verify_len + f.verified, "k": f.verify_len / f.verified,
            "accepted": f.accepted, "generated": f.generated}


def prefill_attrs(f: StepFacts) -> dict[str, float]:
    return {"batch": f.scheduled, "tokens": f.prompt_tokens, "pairs": f.pairs, "ctx": f.ctx}


def known(attrs: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in attrs.items() if not math.isnan(v)}


# ---------------------------------------------------------------------------------------------
# Public readers


def read_minedraft_steps(path: str | Path) -> list[dict[str, Any]]:
    """Every step record of the file in order (warm-up bundles included, as an nsys capture would
    be), as dicts, with `_line`, `_bundle` and, on prompt steps whose requests are known,
    `_prompt_lens` added."""
    trace = load_trace(path)
    return [{**rec.data, "_line": rec.line, "_bundle": rec.bundle} for rec in trace.steps]


def read_minedraft_requests(path: str | Path) -> list[dict[str, Any]]:
    """Every request record (start_us; end_us, prompt_len and gen_len once finished), with `_line`
    and `_bundle` added."""
    trace = load_trace(path)
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
    trace = load_trace(path)
    notes: list[str] = []
    warm = warmup_bundles(trace, notes)
    order = trace.bundles or [0]
    steps: dict[int, list[dict[str, Any]]] = {b: [] for b in order}
    requests: dict[int, list[dict[str, Any]]] = {b: [] for b in order}
    for recs, into in ((trace.steps, steps), (trace.requests, requests)):
        for rec in recs:
            into[rec.bundle].append({**rec.data, "_line": rec.line, "_bundle": rec.bundle})
    return [Iteration(b, steps[b], requests[b]) for b in order if b not in warm], notes


def warmup_bundles(trace: Trace, notes: list[str]) -> set[int]:
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
