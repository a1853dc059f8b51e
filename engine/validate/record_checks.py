"""The record fields of a MineDraft trace that validation computes with, checked, each bad one in
one line naming its file and line: a request's start_us, end_us - start_us no shorter than the
decode steps that ran it, whole prompt_len and gen_len >= 1; a step's batched_requests and
is_prompt_run; accepted_num <= verify_len; a decode step that ran a request for some time."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from psdsim.calibration.minedraft_records import CORRUPT, RECORD_FIX, Iteration
from psdsim.calibration.trace_error import TraceError
from psdsim.sim.numbers import finite


def _at(path: Path, rec: dict[str, Any]) -> str:
    """A record's place for messages: the user's trace, its line and the record's tid."""
    tid = rec.get("tid")
    return f"{path} line {rec['_line']}" + (f" ({tid})" if isinstance(tid, str) else "")


def check_records(path: Path, it: Iteration) -> None:
    """The record fields validation computes with and calibration/minedraft.py does not check (it
    reads steps only as timings): a bad value named at its line here, not a traceback, a NaN in
    the report or an error naming the simulator's temporary request file later."""
    for step in it.steps:
        for key in ("batched_requests", "preempted_requests"):
            ids = step.get(key)
            if ids is not None and not (isinstance(ids, list) and all(isinstance(x, str | int) for x in ids)):
                raise TraceError(_at(path, step),
                                 f"{key} is a {type(ids).__name__}, not a list of request ids", RECORD_FIX)
        flag = step.get("is_prompt_run")
        if flag is not None and not isinstance(flag, bool) and finite(flag) is None:
            raise TraceError(_at(path, step), f"is_prompt_run is {flag!r}, not a count of prefill groups "
                             "(0 for a decode step)", RECORD_FIX)
        accepted, verified = finite(step.get("accepted_num")), finite(step.get("verify_len"))
        if accepted is not None and verified is not None and accepted > verified:
            raise TraceError(_at(path, step), f"accepted_num {accepted:g} exceeds verify_len {verified:g} "
                             "(more drafts accepted than verified)", CORRUPT)
    # Steps without batched_requests scheduled nothing (calibration/minedraft.py drops them):
    # without a decode step that ran a request, for some time, there is no throughput, VSR or
    # spread to measure (the report would hold NaN or nothing).
    decode = [step for step in it.steps if step.get("batched_requests") and not step.get("is_prompt_run")]
    bundle = f"{path} line {it.bundle}" if it.bundle else path
    if not decode:
        raise TraceError(bundle, "no decode step (is_prompt_run 0) ran a request (batched_requests)",
                         "give the trace of a run that decoded, with each step's batched_requests")
    if not any(step["end_us"] > step["start_us"] for step in decode):
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
    for step in decode:
        for tid in step["batched_requests"]:
            spans.setdefault(tid, []).append((step["start_us"], step["end_us"]))
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
