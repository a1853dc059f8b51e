"""From the step and request tables to the summary of docs/design.md §4 and §7.

Paper-compatible (MineDraft's analysis scripts): throughput = generated tokens / time over
decode steps only (prefill-only steps excluded; a step that decodes with prefill chunks riding
along counts as a decode step), also over the first 80% and 70% of decode steps; E2EL =
makespan / requests; VSR = accepted / verified draft tokens; parallelization rate = parallelised
decode steps / decode steps. Serving view: output tokens over the makespan; per-request latency
and TPOT percentiles over finished requests, TTFT over requests that got a first token, queueing
delay (admission - arrival); goodput under the scenario's SLOs. Scheduler view: preemptions and
the tokens they cost, aborts, wasted verifications, sub-batch imbalance, KV use per pool.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from psdsim.sim.kv import KVPools
from psdsim.sim.layout import layout_for
from psdsim.sim.records import DECODE
from psdsim.sim.requests import ABORTED, FINISHED, REJECTED, STATE_NAMES
from psdsim.sim.scenario import Scenario

PERCENTILES = {"mean": None, "p50": 50, "p90": 90, "p99": 99}


def ms_stats(seconds: np.ndarray) -> dict[str, float | None]:
    """Mean and percentiles in ms of the finite values (None each where there are none); the
    engines' results use it too, so measured and simulated summaries share one definition."""
    values = seconds[np.isfinite(seconds)] * 1e3
    if len(values) == 0:
        return dict.fromkeys(PERCENTILES)
    return {name: float(values.mean() if q is None else np.percentile(values, q))
            for name, q in PERCENTILES.items()}


def _mean_ms(seconds: np.ndarray) -> float | None:
    return float(seconds.mean() * 1e3) if len(seconds) else None


def ratio(num: float, den: float) -> float | None:
    """num / den, or None where nothing was counted (den = 0)."""
    return float(num / den) if den > 0 else None


def step_throughput(generated: np.ndarray, durations: np.ndarray, fraction: float) -> float | None:
    """Tokens per second over the first `fraction` of the steps (at least one)."""
    n = max(1, int(len(generated) * fraction)) if len(generated) else 0
    return ratio(generated[:n].sum(), durations[:n].sum())


def _tpot(requests: dict[str, np.ndarray]) -> np.ndarray:
    """Time per output token after the first; requests with a single output token have none."""
    later = requests["output_len"] - 1
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(later > 0, (requests["finish_s"] - requests["first_token_s"]) / later, np.nan)


def _state_count(requests: dict[str, np.ndarray], state: int) -> int:
    return int(np.count_nonzero(requests["state"] == STATE_NAMES[state]))


def goodput(s: Scenario, requests: dict[str, np.ndarray], makespan: float) -> dict[str, float | None]:
    """Requests meeting every SLO the scenario sets (finished ones only can)."""
    limits = {"ttft": s.slo_ttft_ms, "tpot": s.slo_tpot_ms, "latency": s.slo_latency_ms}
    if all(v is None for v in limits.values()):
        return {"slo_attainment": None, "goodput_req_s": None, "goodput_tok_s": None}
    ok = requests["state"] == STATE_NAMES[FINISHED]
    measured = {"ttft": requests["first_token_s"] - requests["arrival_s"], "tpot": _tpot(requests),
                "latency": requests["finish_s"] - requests["arrival_s"]}
    for name, limit in limits.items():
        if limit is not None:
            value = measured[name] * 1e3
            ok &= ~(value > limit)  # NaN (no later tokens, for TPOT) counts as met
    n = len(ok)
    return {"slo_attainment": float(ok.sum() / n), "goodput_req_s": ratio(ok.sum(), makespan),
            "goodput_tok_s": ratio(requests["output_len"][ok].sum(), makespan)}


def _per_prompt(s: Scenario, requests: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(latency, TTFT) in seconds per prompt: with n samples a prompt is answered when its last
    sample finishes (NaN unless all finished) and starts answering with its first sample's
    first token, as vLLM reports a request with n > 1; with n = 1, per request."""
    latency = requests["finish_s"] - requests["arrival_s"]
    ttft = requests["first_token_s"] - requests["arrival_s"]
    if s.n == 1:
        return latency, ttft
    return latency.reshape(-1, s.n).max(axis=1), np.fmin.reduce(ttft.reshape(-1, s.n), axis=1)


def summarize(s: Scenario, steps: dict[str, np.ndarray], requests: dict[str, np.ndarray], *,
              gpus: int, uses_drafter: bool, drafter_busy_s: float, verifier_busy_s: float,
              kv: KVPools) -> dict[str, Any]:
    decode = steps["kind"] == DECODE
    dur = (steps["end_s"] - steps["start_s"])[decode]
    gen = steps["generated"][decode]
    makespan = float(np.nanmax(requests["end_s"]) - requests["arrival_s"].min())
    n = len(requests["request"])
    prompts = n // s.n
    latency_s, ttft_s = _per_prompt(s, requests)
    linked = layout_for(s).over_link
    throughput = step_throughput(gen, dur, 1.0)
    imbalance = np.abs(steps["batch1"] - steps["batch0"])[decode] if s.sub_batched else None
    summary: dict[str, Any] = {
        "method": s.method,
        "k": s.k if uses_drafter else None,
        "m": s.m,
        "requests": prompts,
        "sequences": n,
        "gpus": gpus,
        "makespan_s": makespan,
        "throughput_tok_s": throughput,
        "throughput_tok_s_trim80": step_throughput(gen, dur, 0.8),
        "throughput_tok_s_trim70": step_throughput(gen, dur, 0.7),
        "throughput_tok_s_per_gpu": throughput / gpus if throughput is not None else None,
        "output_tok_s": ratio(requests["generated"].sum(), makespan),
        "e2el_ms": makespan / prompts * 1e3,
        "latency_ms": ms_stats(latency_s),
        "ttft_ms": ms_stats(ttft_s),
        "tpot_ms": ms_stats(_tpot(requests)),
        "queue_ms": ms_stats(requests["admitted_s"] - requests["arrival_s"]),
        "vsr": ratio(steps["accepted"].sum(), steps["proposed"].sum()) if uses_drafter else None,
        "drafts_per_verification": (ratio(steps["proposed"][decode].sum(), steps["verified"][decode].sum())
                                    if uses_drafter else None),
        "parallelization_rate": (ratio(steps["parallelised"][decode].sum(), decode.sum())
                                 if uses_drafter else None),
        "comm_share": ratio(steps["wait_s"][decode].sum(), dur.sum()) if linked else None,
        "link_share": ratio(steps["link_critical_s"][decode].sum(), dur.sum()) if linked else None,
        "drafter_busy": (ratio(drafter_busy_s, makespan * max(1, layout_for(s).drafter_gpus))
                         if uses_drafter else None),
        "verifier_busy": ratio(verifier_busy_s, makespan),
        "decode_steps": int(decode.sum()),
        "prefill_steps": int((~decode).sum()),
        "preemptions": int(requests["preemptions"].sum()),
        "recomputed_tokens": int(requests["recomputed_tokens"].sum()),
        "swap_s": float(steps["swap_s"].sum()),
        "aborted": _state_count(requests, ABORTED),
        "rejected": _state_count(requests, REJECTED),
        "wasted_verifications": int(steps["unproposed"].sum()) if uses_drafter else None,
        "imbalance_mean": float(imbalance.mean()) if imbalance is not None and len(imbalance) else None,
        "imbalance_max": int(imbalance.max()) if imbalance is not None and len(imbalance) else None,
        "imbalance_final": int(imbalance[-1]) if imbalance is not None and len(imbalance) else None,
        "kv_pool_blocks": dict(kv.capacities),
        "kv_peak_usage": {side: kv.peak / cap for side, cap in kv.capacities.items()},
        "kv_binding_pool": kv.binding,
        "mean_draft_ms": _mean_ms(steps["draft_s"][decode]) if uses_drafter else None,
        "mean_verify_ms": _mean_ms(steps["verify_s"][decode]),
        "mean_comm_ms": _mean_ms(steps["comm_s"][decode]),
        **goodput(s, requests, makespan),
        "fits": True,
        "infeasible_reason": None,
    }
    return summary


def infeasible_summary(s: Scenario, reason: str, gpus: int) -> dict[str, Any]:
    """The summary of a run that could not start: what it was, and why not."""
    return {"method": s.method, "k": s.k, "m": s.m, "requests": s.requests, "gpus": gpus,
            "fits": False, "infeasible_reason": reason}
