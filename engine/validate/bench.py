"""`psdsim validate --bench RESULT.json`: a `vllm bench serve` run, measured against predicted.

The result (saved with `--save-result --save-detailed`) gives the traffic, each request's send
time, prompt and output tokens (read as a trace: sim/trace_formats.py), and what the client
measured of each: TTFT and end-to-end latency, hence TPOT by vLLM's rule ((latency - TTFT) /
(output - 1), for outputs of more than one token). The scenario gives the hardware, models,
engine and method. psdsim replays the same requests and derives the same figures from its own
per-request times, by the same percentile rule (numpy's linear one, as vLLM's): request and
output throughput over the run's duration, and the mean, p50, p90 and p99 of TTFT, TPOT and
E2E latency. Each is compared as a relative error; `--max-error` gates on them as it does for
traces (engine/validate/gate.py).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from psdsim.engine.validate.report import format_error, format_value
from psdsim.sim.errors import ScenarioError
from psdsim.sim.input_paths import input_file
from psdsim.sim.output.report import infeasible_error
from psdsim.sim.run import simulate
from psdsim.sim.scenario import FIELDS, Scenario, load_scenario
from psdsim.sim.trace_replay import scenario_trace

LATENCIES = ("ttft_ms", "tpot_ms", "e2el_ms")
STATISTICS = ("mean", "p50", "p90", "p99")
METRICS: tuple[tuple[str, str], ...] = (
    ("request_throughput", "req/s"), ("output_throughput", "tok/s"),
    *((f"{name}.{stat}", f"{name.split('_')[0].upper()} {stat} ms")
      for name in LATENCIES for stat in STATISTICS),
)
KEYS = tuple(key for key, _ in METRICS)
ALIASES = {"throughput": "output_throughput", "ttft": "ttft_ms.p50", "tpot": "tpot_ms.p50",
           "e2el": "e2el_ms.p50"}
FIX = "give a result of `vllm bench serve --save-result --save-detailed` whose requests all completed"
# A detailed result keeps a few numbers and its texts per request: a million requests stay well
# under this, while a larger file is not a result and would be parsed whole into memory.
MAX_RESULT_BYTES = 1 << 30
# Scenario fields the result itself decides: its requests are the workload.
FROM_RESULT = ("trace", "requests", "rate", "n", "trace_speedup", "trace_start_s", "trace_duration_s")


def figures(ttft_s: np.ndarray, e2el_s: np.ndarray, output_len: np.ndarray,
            duration_s: float) -> dict[str, float]:
    """The benchmark's figures from per-request times (seconds) and output lengths, as vLLM
    computes them: TPOT only over requests of more than one output token."""
    long = output_len > 1
    tpot_s = (e2el_s[long] - ttft_s[long]) / (output_len[long] - 1)
    out = {"request_throughput": len(e2el_s) / duration_s,
           "output_throughput": float(output_len.sum()) / duration_s}
    for name, values in (("ttft_ms", ttft_s), ("tpot_ms", tpot_s), ("e2el_ms", e2el_s)):
        ms = 1000.0 * np.asarray(values, dtype=float)
        out.update({f"{name}.mean": float(ms.mean()) if ms.size else math.nan,
                    **{f"{name}.p{q}": float(np.percentile(ms, q)) if ms.size else math.nan
                       for q in (50, 90, 99)}})
    return out


def _result(path: Path) -> dict[str, Any]:
    """The result's JSON object, read only from a regular file of a result's size (a pipe would
    never end, a device never stop)."""
    real = input_file(path, "--bench", "a benchmark result", FIX)
    if real.stat().st_size > MAX_RESULT_BYTES:
        raise ScenarioError("--bench", f"{path.name}: larger than {MAX_RESULT_BYTES >> 20:,} MiB, not a "
                            "benchmark result", FIX)
    try:
        doc = json.loads(real.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ScenarioError("--bench", f"{path.name}: not UTF-8 JSON text (a compressed file?)",
                            FIX) from None
    except (OSError, json.JSONDecodeError, RecursionError) as exc:
        raise ScenarioError("--bench", f"{path.name}: not a readable JSON result ({exc.__class__.__name__})",
                            FIX) from None
    if not isinstance(doc, dict):
        raise ScenarioError("--bench", f"{path.name}: not a JSON object", FIX)
    return doc


def measured(path: Path, doc: Mapping[str, Any]) -> dict[str, float]:
    """What the client measured, from the result's per-request lists and its duration."""
    lists = {}
    for key in ("ttfts", "latencies", "output_lens"):
        values = doc.get(key)
        if not isinstance(values, list) or not all(isinstance(v, int | float) and math.isfinite(v)
                                                   and not isinstance(v, bool) for v in values):
            raise ScenarioError("--bench", f"{path.name}: field {key!r}: missing or not a list of numbers",
                                FIX)
        lists[key] = np.array(values, dtype=float)
    duration = doc.get("duration")
    if not isinstance(duration, int | float) or not duration > 0 or not math.isfinite(duration):
        raise ScenarioError("--bench", f"{path.name}: field 'duration': {duration!r} is not a positive "
                            "number of seconds", FIX)
    return figures(lists["ttfts"], lists["latencies"], lists["output_lens"], float(duration))


def predicted(s: Scenario) -> dict[str, float]:
    """The same figures from a simulation of the scenario."""
    result = simulate(s)
    if not result.fits:
        raise infeasible_error(s.method, result, s)
    req = result.requests
    arrival, first, finish = req["arrival_s"], req["first_token_s"], req["finish_s"]
    return figures(first - arrival, finish - arrival, np.asarray(req["output_len"]),
                   float(finish.max() - arrival.min()))


def bench_scenario(path: Path, scenario: Path | None, overrides: Sequence[str]) -> Scenario:
    """The scenario the benchmark is predicted under: its file and `--set`, replaying every request
    of the result."""
    for item in overrides:
        name = item.partition("=")[0].strip()
        if name in FROM_RESULT:
            raise ScenarioError(name, "is what the benchmark result says (its requests are the workload)",
                                f"remove --set {name}=…")
    s = load_scenario(scenario, [*overrides, f"trace={path}"])
    for name in ("n", "trace_speedup", "trace_start_s", "trace_duration_s"):   # set in the file
        if getattr(s, name) != FIELDS[name].default:
            raise ScenarioError(name, "is what the benchmark result says (each request is one sample, sent "
                                "when it was)", f"remove {name} from the scenario")
    trace = scenario_trace(s)
    assert trace is not None   # trace was just set
    return s.replace(requests=len(trace.prompt_len))


def validate_bench(path: Path, scenario: Path | None, overrides: Sequence[str]) -> dict[str, Any]:
    """The report: the result's configuration, the scenario, every metric measured and predicted."""
    doc = _result(path)
    s = bench_scenario(path, scenario, overrides)
    seen, model = measured(path, doc), predicted(s)
    cells = {key: {"measured": seen[key], "predicted": model[key],
                   "error": (model[key] - seen[key]) / seen[key] if seen[key] and math.isfinite(seen[key])
                   and math.isfinite(model[key]) else None}
             for key in KEYS}
    bench = {key: doc.get(key) for key in ("model_id", "backend", "request_rate", "burstiness",
                                           "max_concurrency", "num_prompts", "date")}
    return {"bench": {"file": path.name, **bench}, "scenario": {"name": s.name, "digest": s.digest(),
            "method": s.method, "target": s.target, "draft": s.draft, "gpu": s.gpu, "k": s.k, "m": s.m},
            "requests": s.requests, "rows": [{"run": path.stem, "in_sample": False, "metrics": cells}]}


def table_lines(report: Mapping[str, Any]) -> list[str]:
    """One line a metric: measured, predicted, error."""
    cells = report["rows"][0]["metrics"]
    lines = [f"  {'metric':<22}{'measured':>12}{'predicted':>12}{'error':>9}"]
    for key, label in METRICS:
        c = cells[key]
        lines.append(f"  {label:<22}{format_value(c['measured'], key):>12}"
                     f"{format_value(c['predicted'], key):>12}{format_error(c['error']):>9}")
    return lines
