"""Whether a summary may be printed or written as a result: no figure NaN or infinite, times
within the clock's resolution, steps that took time. Every simulated summary passes through
`valid_figures` (sim/metrics.summarize), so a run priced from inputs far from any real hardware
or workload ends in one line naming the figure and the inputs, never in a wrong figure.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from psdsim.sim.errors import ScenarioError
from psdsim.sim.scenario import MAX_SPAN_S, Scenario


def _figures(value: Any, name: str) -> Iterator[tuple[str, float]]:
    """Every float in a summary (nested ones as `latency_ms.p50`), with its name."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _figures(inner, f"{name}.{key}" if name else key)
    elif isinstance(value, float):
        yield name, value


def _inputs(s: Scenario) -> str:
    """The inputs a figure came from that the scenario's own checks cannot bound alone."""
    files = [f"{field} {getattr(s, field)}" for field in ("profile", "catalog", "trace") if getattr(s, field)]
    return "the scenario's values with " + ", ".join(files) if files else "the scenario's values and costs"


def valid_figures(s: Scenario, summary: dict[str, Any]) -> dict[str, Any]:
    """`summary`, once no figure in it is NaN or infinite and its times lie within the clock's
    resolution (MAX_SPAN_S): else the ScenarioError that names the figure and the inputs it
    came from. Every simulated summary passes through here (summarize), so no command prints or
    writes an invalid figure as a result. A figure that does not apply is None, never NaN
    (SUMMARY_KEYS says where)."""
    fix = ("look among those inputs for a value far from any real hardware or workload (a cost, a "
           "bandwidth, a size or a rate); no figure is printed from such a run")
    for name, value in _figures(summary, ""):
        if not math.isfinite(value):
            raise ScenarioError("summary", f"{name} came out {value} from {_inputs(s)}", fix)
    makespan = summary["makespan_s"]
    if makespan > MAX_SPAN_S:
        raise ScenarioError("summary", f"makespan_s {makespan:.3g} s from {_inputs(s)} is past the "
                            f"{MAX_SPAN_S:g} s within which the simulated clock (a float64) resolves a "
                            "tenth of a microsecond: its step times are lost to rounding", fix)
    _check_steps_took_time(s, summary, fix)
    return summary


# The shortest time an engine step can take: a nanosecond, the finest any trace times, and far
# below a GPU kernel launch (microseconds); a run faster than that per step measured nothing.
MIN_STEP_S = 1e-9


def _check_steps_took_time(s: Scenario, summary: dict[str, Any], fix: str) -> None:
    """A run that took steps (emitted tokens) in no time, or in less than a nanosecond a step,
    priced its work at nothing: its throughput is infinite or absurd and its latencies 0."""
    steps = sum(summary.get(key) or 0 for key in ("decode_steps", "mixed_steps", "prefill_steps"))
    if not steps:
        return
    latency = summary.get("latency_ms") or {}
    timed = [("makespan_s", summary["makespan_s"], steps * MIN_STEP_S)]
    if isinstance(latency.get("mean"), float):
        timed.append(("latency_ms.mean", latency["mean"], MIN_STEP_S * 1e3))
    for name, value, least in timed:
        if value < least:
            raise ScenarioError("summary", f"{name} {value:.3g} from {_inputs(s)} means its {steps:,} "
                                f"steps took under {MIN_STEP_S:g} s each: no hardware runs a step that "
                                "fast, so its costs are no measurement", fix)
