"""What a recorded real run measured, one iteration at a time, and the requests it served, as the
simulator's request trace.

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

from collections.abc import Sequence
from typing import Any

import numpy as np

from psdsim.calibration.minedraft_records import Iteration
from psdsim.engine.validate.describe import requests_jsonl
from psdsim.sim.metrics import ms_stats, ratio, step_throughput
from psdsim.sim.scenario import Scenario

US = 1e-6


def measured_summary(it: Iteration, s: Scenario) -> dict[str, Any]:
    """One iteration's metrics under the simulator's names (see the module docstring)."""
    ran = [step for step in it.steps if step.get("batched_requests")]
    decode = [step for step in ran if not step.get("is_prompt_run")]
    dur = np.array([(step["end_us"] - step["start_us"]) * US for step in decode])
    generated = np.array([_generated(step) for step in decode], dtype=float)
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
        "vsr": (ratio(sum(step.get("accepted_num") or 0 for step in decode),
                      sum(step.get("verify_len") or 0 for step in decode)) if speculative else None),
        "parallelization_rate": (ratio(sum(bool(step.get("is_parallelised")) for step in decode), len(decode))
                                 if speculative else None),
        "decode_steps": len(decode), "prefill_steps": len(ran) - len(decode),
        "preemptions": sum(len(step.get("preempted_requests") or ()) for step in it.steps),
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
    for step in ran:
        if step.get("is_prompt_run") and r.get("tid") in step["batched_requests"]:
            return step["end_us"] * US
    return float("nan")


def prediction_requests(it: Iteration, s: Scenario) -> str:
    """The iteration's requests as the simulator's request trace: one line per prompt (its first
    sample's prompt and arrival, its samples' longest output)."""
    reqs = it.requests
    first_step = min((step["start_us"] for step in it.steps if step.get("batched_requests")), default=np.inf)
    groups = [reqs[i:i + s.n] for i in range(0, len(reqs), s.n)]
    return requests_jsonl([int(g[0]["prompt_len"]) for g in groups],
                          [max(int(r["gen_len"]) for r in g) for g in groups],
                          [arrival_s(g[0], reqs, first_step) for g in groups])


def arrival_s(r: dict[str, Any], reqs: Sequence[dict[str, Any]], first_step: float) -> float:
    """Seconds from the first arrival; 0 for a request there before the first step (offline)."""
    if r["start_us"] <= first_step:
        return 0.0
    return (r["start_us"] - min(q["start_us"] for q in reqs)) * US
