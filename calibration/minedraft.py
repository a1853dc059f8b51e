"""MineDraft's own step trace (`minedraft/benchmarks/trace.py`, JSONL) → step samples.

Each spec-decode step gives a `verify` sample (MineDraft's `measured_target_time`: under PSD the
overlapped draft ∥ verify region), a `draft` sample where drafting was not overlapped, and an
`overhead` sample; each prompt step a `prefill` sample. Why each timer means what it does, and
how the time unit is inferred: docs/calibration.md, "MineDraft's step trace, field by field".
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from statistics import median
from typing import Any

from psdsim.calibration.minedraft_records import (
    MEASURED,
    Record,
    StepFacts,
    Trace,
    as_number,
    known,
    load_trace,
    prefill_attrs,
    step_facts,
    step_role,
    verify_attrs,
    warmup_bundles,
)
from psdsim.calibration.phases import Built, TraceInfo
from psdsim.calibration.samples import StepSample
from psdsim.calibration.trace_error import TraceError

US = 1e-6
UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6))
MAX_RATIO = 1.5    # measured times may exceed the step wall time by this much (timer jitter)
MIN_RATIO = 0.01   # ... and must cover at least this share of it, so that at most one unit fits


def _infer_unit(trace: Trace) -> tuple[str, float, str]:
    sums, walls = [], []
    for rec in trace.steps:
        d = rec.data
        wall = (d["end_us"] - d["start_us"]) * US
        total = sum(as_number(d.get(key)) for key in MEASURED if d.get(key) is not None)
        if step_role(d) != "empty" and wall > 0 and total > 0:
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


def read_minedraft(path: str | Path) -> tuple[Built, TraceInfo]:
    """Samples from a MineDraft JSONL step trace (the fields' meanings: docs/calibration.md)."""
    trace = load_trace(path)
    path = trace.path
    _, scale, unit_note = _infer_unit(trace)
    dropped: Counter[str] = Counter(trace.dropped)
    notes: list[str] = [unit_note]
    warm = warmup_bundles(trace, notes)
    starts = [r.data["start_us"] for r in (*trace.steps, *trace.requests)
              if isinstance(r.data.get("start_us"), int | float)]
    t0 = min(starts)
    samples: list[StepSample] = []
    roles: Counter[str] = Counter()
    no_batch = parallelised = timed_apart = 0

    for rec in trace.steps:
        d = rec.data
        f = step_facts(d)
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
                rec: Record = rec, start_s: float = start_s, end_s: float = end_s) -> None:
            value = rec.data.get(key)
            if value is None:
                return
            seconds = float(value) * scale
            if seconds <= 0:
                dropped[f"{kind}: zero {key}"] += 1
                return
            samples.append(StepSample(kind, start_s, end_s, seconds, seconds, mixed=mixed,
                                      source=f"{path.name}:{rec.line}:{key}").with_attrs(known(attrs)))

        if "psdsim_target_time" in d:   # psdsim's reference engine: every piece timed on its own
            timed_apart += 1
            for kind, seconds, attrs in _psdsim_parts(d, f):
                if seconds > 0:
                    samples.append(StepSample(kind, start_s, end_s, seconds, seconds,
                                              source=f"{path.name}:{rec.line}:psdsim_{kind}")
                                   .with_attrs(known(attrs)))
            continue
        overhead = {"batch": f.scheduled}
        if f.role == "prompt":
            add("prefill", "measured_target_time", prefill_attrs(f))
        else:
            add("verify", "measured_target_time", verify_attrs(f), mixed=f.mixed)
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


def _psdsim_parts(d: dict[str, Any], f: StepFacts) -> list[tuple[str, float, dict[str, float]]]:
    """The samples of a step record written by psdsim's reference engine (engine/reference/
    trace.py): the target pass alone, each drafting (before or overlapped with the pass), the
    channel both ways, rejection sampling and the rest of the step, each with its batch and
    context tokens."""
    def t(key: str) -> float:
        return as_number(d.get(key, 0.0))

    tokens = as_number(d.get("batched_token_num"))
    batch, ctx = as_number(d.get("psdsim_verify_batch")), as_number(d.get("psdsim_verify_context_tokens"))
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
                          {"batch": as_number(d.get(f"psdsim_draft_{when}_batch")), "k": k,
                           "ctx": as_number(d.get(f"psdsim_draft_{when}_context_tokens"))}))
        parts.append(("reject", t("psdsim_reject_time"), {"positions": tokens}))
    parts.append(("broadcast", t("psdsim_send_time"), {"nbytes": as_number(d.get("psdsim_send_bytes"))}))
    parts.append(("comm", t("psdsim_return_time"), {"nbytes": as_number(d.get("psdsim_return_bytes"))}))
    parts.append(("overhead", t("measured_overhead_time") - t("psdsim_reject_time"), {"batch": f.scheduled}))
    return parts
