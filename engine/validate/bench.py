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
from psdsim.sim.catalog.hf_config import is_config_path
from psdsim.sim.documents import DuplicateKey, duplicate_key_error, load_json, parse_document
from psdsim.sim.errors import ScenarioError
from psdsim.sim.input_paths import input_file
from psdsim.sim.numbers import shown
from psdsim.sim.output.report import infeasible_error
from psdsim.sim.run import simulate
from psdsim.sim.scenario import FIELDS, Scenario, catalog_for, load_scenario
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
DURATION_SLACK = 1e-3   # the client's clock reads the run's start and end around its requests
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
        doc = parse_document(load_json, real.read_text(encoding="utf-8"), "--bench", path.name)
    except DuplicateKey as exc:
        raise duplicate_key_error("--bench", path.name, exc) from None
    except UnicodeDecodeError:
        raise ScenarioError("--bench", f"{path.name}: not UTF-8 JSON text (a compressed file?)",
                            FIX) from None
    except (OSError, json.JSONDecodeError, RecursionError) as exc:
        raise ScenarioError("--bench", f"{path.name}: not a readable JSON result ({exc.__class__.__name__})",
                            FIX) from None
    if not isinstance(doc, dict):
        raise ScenarioError("--bench", f"{path.name}: not a JSON object", FIX)
    return doc


def _seconds(value: Any) -> float | None:
    """A JSON number as a finite float, or None (a bool, text, or an integer past a float's range)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        x = float(value)
    except OverflowError:
        return None
    return x if math.isfinite(x) else None


def _numbers(path: Path, doc: Mapping[str, Any], key: str) -> np.ndarray:
    values = doc.get(key)
    numbers = [_seconds(v) for v in values] if isinstance(values, list) else [None]
    if not numbers or None in numbers:
        raise ScenarioError("--bench", f"{path.name}: field {key!r}: missing or not a list of finite numbers",
                            FIX)
    return np.array(numbers, dtype=float)


def _refuse(path: Path, problem: str) -> None:
    raise ScenarioError("--bench", f"{path.name}: {problem}", FIX)


def _check_requests(path: Path, lists: Mapping[str, np.ndarray]) -> None:
    """Times no client measures: negative, a first token after the last, a request with output
    that took no time; output lengths that are not whole tokens."""
    ttft, latency, out = lists["ttfts"], lists["latencies"], lists["output_lens"]
    if (ttft < 0).any() or (latency <= 0).any():
        _refuse(path, "a request with a negative TTFT or a latency <= 0 s (no client measures that)")
    if (ttft > latency).any():
        i = int(np.argmax(ttft > latency))
        _refuse(path, f"request {i}: TTFT {ttft[i]:g} s is after its end-to-end latency {latency[i]:g} s")
    if (out < 1).any() or (out != np.round(out)).any():
        _refuse(path, "field 'output_lens': each must be a whole number of tokens >= 1")


def _check_completed(path: Path, doc: Mapping[str, Any], requests: int) -> None:
    """vLLM counts the requests that completed; a result whose count is not its lists' (an edited
    or a merged file) measures requests other than those its figures claim."""
    completed = doc.get("completed")
    if completed is not None and (isinstance(completed, bool) or completed != requests):
        _refuse(path, f"field 'completed': {shown(completed)}, but its per-request lists hold {requests} "
                "completed requests (an edited or merged result?)")


def _duration(path: Path, doc: Mapping[str, Any], lists: Mapping[str, np.ndarray]) -> float:
    """The run's duration, which spans every request from the first sent to the last finished."""
    duration = _seconds(doc.get("duration"))
    if duration is None or not duration > 0:
        _refuse(path, f"field 'duration': {doc.get('duration')!r:.40} is not a positive number of seconds")
    assert duration is not None
    if "start_times" in lists:
        start = lists["start_times"]
        span = float((start + lists["latencies"]).max() - start.min())
        if duration < span * (1 - DURATION_SLACK):
            _refuse(path, f"field 'duration': {duration:g} s is shorter than its requests span "
                    f"({span:g} s from the first sent to the last finished)")
    return duration


def measured(path: Path, doc: Mapping[str, Any]) -> dict[str, float]:
    """What the client measured, from the result's per-request lists and its duration, each
    checked to be a time a client could have measured (so no figure printed is impossible)."""
    keys = ("ttfts", "latencies", "output_lens", *(("start_times",) if "start_times" in doc else ()))
    lists = {key: _numbers(path, doc, key) for key in keys}
    if len({len(v) for v in lists.values()}) > 1:
        _refuse(path, "its per-request lists differ in length ("
                + ", ".join(f"{key} {len(v)}" for key, v in lists.items()) + ")")
    _check_requests(path, lists)
    _check_completed(path, doc, len(lists["latencies"]))
    duration = _duration(path, doc, lists)
    with np.errstate(all="ignore"):   # a figure past a float's range is refused just below
        out = figures(lists["ttfts"], lists["latencies"], lists["output_lens"], duration)
    if not all(math.isfinite(v) for key, v in out.items() if not (key.startswith("tpot") and math.isnan(v))):
        _refuse(path, "its times are too large for their figures to be finite")
    return out


def check_model(doc: Mapping[str, Any], s: Scenario) -> str | None:
    """Refuses a result of a catalog model other than the scenario's target (the comparison would
    be of two different models); a note when the result's model is in no catalog entry."""
    model_id = doc.get("model_id")
    if not isinstance(model_id, str):
        return f"the result names no model_id: predicted as {s.target} unchecked"
    if is_config_path(s.target) and _model_folder(s.target) == Path(model_id).resolve():
        return None   # a local folder was served, and the scenario prices that folder's config.json
    cat = catalog_for(s)
    matches = [key for key, m in cat.models.items() if m.hf_id.lower() == model_id.lower()]
    if not matches:
        return f"model_id {model_id!r} is in no catalog entry: predicted as {s.target} unchecked"
    if s.target not in matches:
        raise ScenarioError("target", f"{s.target!r} is not the model the result measured ({model_id}, "
                            f"catalog {matches[0]!r})", f"--set target={matches[0]}")
    return None


def _model_folder(target: str) -> Path:
    """The folder of the config.json a target names (itself, or the folder holding one)."""
    path = Path(target).resolve()
    return path.parent if path.suffix == ".json" else path


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


def _defined(x: float) -> float | None:
    """A figure, or None where it is undefined (TPOT of a run whose outputs are all one token)."""
    return None if math.isnan(x) else x


def validate_bench(path: Path, scenario: Path | None, overrides: Sequence[str]) -> dict[str, Any]:
    """The report: the result's configuration, the scenario, every metric measured and predicted."""
    doc = _result(path)
    seen = measured(path, doc)
    s = bench_scenario(path, scenario, overrides)
    note = check_model(doc, s)
    model = predicted(s)
    cells = {key: {"measured": _defined(seen[key]), "predicted": _defined(model[key]),
                   "error": (model[key] - seen[key]) / seen[key] if seen[key] and math.isfinite(seen[key])
                   and math.isfinite(model[key]) else None}
             for key in KEYS}
    bench = {key: doc.get(key) for key in ("model_id", "backend", "request_rate", "burstiness",
                                           "max_concurrency", "num_prompts", "date")}
    return {"bench": {"file": path.name, **bench}, "scenario": {"name": s.name, "digest": s.digest(),
            "method": s.method, "target": s.target, "draft": s.draft, "gpu": s.gpu, "k": s.k, "m": s.m},
            "requests": s.requests, "notes": [note] if note else [],
            "rows": [{"run": path.stem, "in_sample": False, "metrics": cells}]}


def table_lines(report: Mapping[str, Any]) -> list[str]:
    """One line a metric: measured, predicted, error."""
    cells = report["rows"][0]["metrics"]
    lines = [f"  {'metric':<22}{'measured':>12}{'predicted':>12}{'error':>9}"]
    for key, label in METRICS:
        c = cells[key]
        lines.append(f"  {label:<22}{format_value(c['measured'], key):>12}"
                     f"{format_value(c['predicted'], key):>12}{format_error(c['error']):>9}")
    return lines
