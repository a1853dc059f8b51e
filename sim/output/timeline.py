"""A simulated run as a Chrome trace-event JSON file, to read it in Perfetto beside real traces.

Why: the summary and the step table say how long work took; a timeline shows where a step's time
goes (drafting hidden behind verification or not, the link queueing, the tail where PSD falls back
to sequential steps) in the viewer that opens real Kineto and nsys-exported traces
(ui.perfetto.dev, chrome://tracing).

Recording is opt-in (`simulate(s, timeline=True)`): the devices and the methods add a slice only
when the run holds a `Timeline`, so a run without one does no extra work, and a run with one draws
the same numbers and gives the same results. A slice is one piece of work on one resource (a
track: the drafter GPU or GPUs, the verifier group, each link lane, the driver) with its start and
end taken from the SimPy clock. One exception, stated in the file's otherData: the work after a
verification (the draft model's pass over the step's prompt tokens, rejection sampling, the
framework overhead, KV swaps) is a single wait in the simulation; its parts are laid end to end in
that order. Export adds what the step table already holds: an "engine steps" track, the outcome of
each step's target pass (one per step, joined by step index) and counters of requests and KV
blocks, so recording stays small.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from psdsim.sim.decoupled_run import replica_track
from psdsim.sim.devices import TO_DRAFTER, TO_VERIFIER
from psdsim.sim.layout import COLOCATED, layout_for
from psdsim.sim.output.atomic_writes import write_file
from psdsim.sim.timeline import DRAFTER, DRIVER, ON_VERIFIER, STEP, STEPS, VERIFIER, drafter_track

if TYPE_CHECKING:
    from psdsim.sim.run import Result

PID = 1
US = 1e6  # trace-event times are microseconds
# Outcome of a step's target pass, copied from its step record onto the verifier slice.
OUTCOME = {"batch": "verified", "scored": "scored", "proposed": "proposed", "accepted": "accepted",
           "generated": "generated", "prefill_tokens": "prefill_tokens"}
NOTES = [
    "ts and dur are microseconds of simulated time, from the SimPy clock",
    "the work after a verification is one wait in the simulation; its parts (draft model prefill, "
    "rejection sampling, overhead, KV swap) are laid end to end in that order",
    "verifier slices carry their step's outcome from the step table (one target pass per step)",
]


def _track_names(result: Result) -> dict[str, str]:
    """Display names of the tracks, in display order."""
    s = result.scenario
    layout = layout_for(s)
    names = {STEPS: "engine steps", DRIVER: "driver (engine loop)"}
    if layout.drafter == COLOCATED:
        names[DRAFTER] = "drafter (on verifier GPU 0)"
    else:
        names[DRAFTER] = "drafter GPU"
        names.update({drafter_track(i): f"drafter GPU {i}" for i in range(layout.drafter_gpus)})
    names[TO_VERIFIER] = "link → verifier (inputs)"
    names[VERIFIER] = f"verifier (target, TP={layout.verifier_tp})"
    for r in range(layout.verifier_groups if s.method == "decoupled" else 0):   # replicas side by side
        names[replica_track(DRIVER, r)] = f"driver of verifier {r}"
        names[replica_track(VERIFIER, r)] = f"verifier {r} (target, TP={layout.verifier_tp})"
    names[TO_DRAFTER] = "link → drafter (sampler output)"
    return names


def _event(name: str, cat: str, tid: int, start_s: float, end_s: float, args: dict[str, Any]) -> dict:
    ts = start_s * US
    return {"name": name, "cat": cat, "ph": "X", "ts": ts, "dur": end_s * US - ts, "pid": PID,
            "tid": tid, "args": args}


def _step_events(rows: list[dict[str, Any]], tid: int) -> list[dict[str, Any]]:
    """The engine steps track (each step with its record) and the counters, from the step table."""
    events = []
    for i, row in enumerate(rows):
        args = {"step": i, **{c: v for c, v in row.items() if c not in ("kind", "start_s", "end_s")}}
        events.append(_event(f"{row['kind']} step", STEP, tid, row["start_s"], row["end_s"], args))
        ts = row["start_s"] * US
        events += [{"name": "requests", "ph": "C", "ts": ts, "pid": PID,
                    "args": {"running": row["running"], "waiting": row["waiting"]}},
                   {"name": "KV blocks in use", "ph": "C", "ts": ts, "pid": PID,
                    "args": {"blocks": row["kv_blocks"]}}]
    return events


def trace_document(result: Result) -> dict[str, Any]:
    """The trace-event document of a run simulated with `timeline=True`."""
    timeline = result.timeline
    if timeline is None:
        raise ValueError("the run was simulated without a timeline (simulate(s, timeline=True))")
    s = result.scenario
    columns = list(result.steps)   # the StepRecord's, then a method's own (the adaptive mode's)
    rows = [dict(zip(columns, row, strict=True))
            for row in zip(*(result.steps[c].tolist() for c in columns), strict=True)]
    used = {sl.track for sl in timeline.slices} | {STEPS}
    names = {key: name for key, name in _track_names(result).items() if key in used}
    tids = {key: tid for tid, key in enumerate(names, start=1)}
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": PID, "args": {"name": f"psdsim {s.name}: {s.method}"}}]
    for key, tid in tids.items():
        events += [{"name": "thread_name", "ph": "M", "pid": PID, "tid": tid, "args": {"name": names[key]}},
                   {"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": tid,
                    "args": {"sort_index": tid}}]
    events += _step_events(rows, tids[STEPS])
    # in order of start on the clock (then track, then end): recording order is how the devices
    # happen to price their work (a booked pass records its slices at once), not a fact of the run
    for sl in sorted(timeline.slices, key=lambda sl: (sl.start_s, tids[sl.track], sl.end_s)):
        args = sl.args
        if sl.cat == ON_VERIFIER:
            row = rows[args["step"]]
            args = {**args, **{key: row[col] for key, col in OUTCOME.items()}}
        events.append(_event(sl.name, sl.cat, tids[sl.track], sl.start_s, sl.end_s, args))
    return {"otherData": {
        "psdsim_version": _version(), "scenario": s.name, "method": s.method, "seed": s.seed,
        "scenario_digest": s.digest(), "makespan_s": result.summary["makespan_s"], "notes": list(NOTES)},
        "displayTimeUnit": "ms", "traceEvents": events}


def _version() -> str:
    # imported here: importlib.metadata costs ~50 ms of start-up that a run without --trace skips
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("psdsim")
    except PackageNotFoundError:
        return "unknown"


def trace_json(result: Result) -> str:
    """The run's trace-event JSON, as write_trace writes it."""
    return json.dumps(trace_document(result), separators=(",", ":"), allow_nan=False) + "\n"


def write_trace(result: Result, path: Path | str, option: str = "path") -> Path:
    """Write the run's trace-event JSON to `path` atomically. An existing file there is replaced
    only when psdsim wrote it and it is unchanged (write_file), as write_result replaces only
    its own folder: ScenarioError naming `option` otherwise."""
    return write_file(Path(path), trace_json(result), option)
