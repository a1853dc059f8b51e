"""A vLLM run summarised under the simulator's names (docs/design.md §7), from what offline vLLM exposes.

Pure Python and numpy over duck-typed inputs (RequestOutput-like objects, metric snapshots), so it
is tested without vLLM. What offline vLLM can and cannot tell, and so what the keys mean here:

* `makespan_s` is the wall time of the measured `LLM.generate` call (all requests arrive when it
  starts; it ends when the last output is back in the caller, detokenisation included).
* `throughput_tok_s` is output tokens / makespan, **prefill included**. The simulator's (and the
  reference engine's) excludes prefill-only steps; vLLM V1 folds prefill chunks into the same
  steps as decodes, and LLM.generate does not expose step times, so the two are not the same
  quantity (this one is lower, by the prefill share). `output_tok_s` is the same number, as its
  definition (over the makespan) is the simulator's. The trimmed throughputs need per-step times:
  None.
* Latencies come from `RequestOutput.metrics` (vLLM's RequestStateStats, present when the engine
  logs stats): TTFT = arrival offset + first_token_latency (frontend wall clock); end = TTFT +
  (last_token_ts - first_token_ts) (engine-core monotonic clock; only a difference is used).
  Without them every request's latency is the makespan and TTFT/TPOT are None.
* `vsr` = accepted / drafted tokens from the spec-decode counters (LLM.get_metrics(), deltas around
  the measured call), the same ratio MineDraft calls VSR; `mean_acceptance_length` = 1 +
  accepted / drafts (the bonus token included); `acceptance_per_pos[i]` = drafts with >= i+1
  tokens accepted / drafts.
* Step-level quantities (drafter/verifier busy, mean draft/verify/comm ms, decode/prefill steps)
  need a per-step record that offline vLLM does not give: None, each with a note. `engine_steps`
  (all steps, from the vllm:iteration_tokens_total histogram count) is given where available.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from psdsim.sim.metrics import ms_stats, ratio

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
PREEMPTIONS = "vllm:num_preemptions"
STEPS = "vllm:iteration_tokens_total"

NO_STEPS = "offline vLLM gives no per-step timing (a torch-profiler trace would)"


def snapshot(metrics: Iterable[Any]) -> dict[str, Any]:
    """LLM.get_metrics() as {name: number or list}: counters and gauges by value, vectors by
    values, histograms by count; label sets (e.g. one per engine) summed; a `_total` suffix on
    counters dropped so names match across prometheus-client versions."""
    out: dict[str, Any] = {}
    for m in metrics:
        name = str(m.name)
        if hasattr(m, "values") and isinstance(m.values, list | tuple):
            value: Any = [float(v) for v in m.values]
            prev = out.get(name)
            if isinstance(prev, list):
                width = max(len(prev), len(value))
                value = [(prev[i] if i < len(prev) else 0.0) + (value[i] if i < len(value) else 0.0)
                         for i in range(width)]
            out[name] = value
            continue
        if hasattr(m, "buckets") or (hasattr(m, "count") and not hasattr(m, "value")):
            value = float(m.count)
        elif hasattr(m, "value"):
            value = float(m.value)
            if name.endswith("_total") and name != STEPS:
                name = name.removesuffix("_total")
        else:
            continue
        out[name] = out.get(name, 0.0) + value
    return out


def delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """after - before for every metric in `after` (lists element by element)."""
    out: dict[str, Any] = {}
    for name, value in after.items():
        prev = before.get(name)
        if isinstance(value, list):
            prev = prev if isinstance(prev, list) else []
            out[name] = [v - (prev[i] if i < len(prev) else 0.0) for i, v in enumerate(value)]
        else:
            out[name] = value - (prev if isinstance(prev, int | float) else 0.0)
    return out


def request_times(outputs: Sequence[Any], start_wall: float, makespan_s: float
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
    """(ttft_s, end_s, generated tokens) per request, from the run's start; and whether vLLM's
    per-request metrics were there (if not, ttft is NaN and end is the makespan)."""
    n = len(outputs)
    ttft, end = np.full(n, np.nan), np.full(n, makespan_s)
    generated = np.array([sum(len(c.token_ids) for c in o.outputs) for o in outputs], dtype=np.int64)
    measured = True
    for i, o in enumerate(outputs):
        metrics = getattr(o, "metrics", None)
        first = getattr(metrics, "first_token_latency", 0.0) or 0.0
        t0, t1 = getattr(metrics, "first_token_ts", 0.0) or 0.0, getattr(metrics, "last_token_ts", 0.0) or 0.0
        if metrics is None or first <= 0 or t0 <= 0 or t1 < t0:
            measured = False
            continue
        offset = max(0.0, float(getattr(metrics, "arrival_time", start_wall)) - start_wall)
        ttft[i] = offset + first
        end[i] = ttft[i] + (t1 - t0)
    if not measured:
        ttft[:] = np.nan
        end[:] = makespan_s
    return ttft, end, generated, measured


def spec_stats(counters: dict[str, Any], k: int) -> dict[str, Any]:
    """Acceptance figures from spec-decode counter deltas (None where nothing was drafted)."""
    drafts = float(counters.get(DRAFTS, 0.0))
    drafted = float(counters.get(DRAFT_TOKENS, 0.0))
    accepted = float(counters.get(ACCEPTED, 0.0))
    per_pos = counters.get(PER_POS) or []
    return {
        "vsr": accepted / drafted if drafted > 0 else None,
        "mean_acceptance_length": 1.0 + accepted / drafts if drafts > 0 else None,
        "acceptance_per_pos": [p / drafts for p in per_pos[:k]] if drafts > 0 and per_pos else None,
        "num_drafts": int(drafts),
        "num_draft_tokens": int(drafted),
        "num_accepted_tokens": int(accepted),
    }


def summarize(outputs: Sequence[Any], *, method: str, k: int, m: int, start_wall: float,
              makespan_s: float, counters: dict[str, Any] | None, extra: dict[str, Any] | None = None
              ) -> dict[str, Any]:
    """The summary dict: the reference engine's keys (engine/reference/result.py) first, in its
    order, then vLLM-only ones; `notes` says, per key, why it is None or how it differs."""
    speculative = method != "ar"
    ttft, end, generated, measured = request_times(outputs, start_wall, makespan_s)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(generated > 1, (end - ttft) / (generated - 1), np.nan)
    tokens = int(generated.sum())
    rate = ratio(tokens, makespan_s)
    notes: dict[str, str] = {
        "throughput_tok_s": "output tokens / makespan, prefill included (the simulator's excludes "
                            "prefill-only steps; vLLM V1 mixes prefill chunks into decode steps)",
        "throughput_tok_s_trim80": NO_STEPS, "throughput_tok_s_trim70": NO_STEPS,
        "drafter_busy": NO_STEPS, "verifier_busy": NO_STEPS, "mean_draft_ms": NO_STEPS,
        "mean_verify_ms": NO_STEPS, "decode_steps": NO_STEPS, "prefill_steps": NO_STEPS,
    }
    if not measured:
        notes["latency_ms"] = "no RequestOutput.metrics (engine stats off?): every latency is the makespan"
        notes["ttft_ms"] = notes["tpot_ms"] = "needs RequestOutput.metrics"
    spec = spec_stats(counters or {}, k) if speculative else dict.fromkeys(
        ("vsr", "mean_acceptance_length", "acceptance_per_pos", "num_drafts", "num_draft_tokens",
         "num_accepted_tokens"))
    if speculative and counters is None:
        notes["vsr"] = "this vLLM has no LLM.get_metrics(): no spec-decode counters"
    elif speculative and spec["vsr"] is None:
        notes["vsr"] = "no draft tokens were counted (engine stats off, or nothing drafted)"
    if method == "sd":
        notes["parallelization_rate"] = "0 by construction: vLLM drafts and verifies one after the other"
        notes["comm_share"] = notes["mean_comm_ms"] = ("draft and target run in the same worker "
                                                       "process: no drafter-verifier channel")
    elif method == "psd":
        notes["parallelization_rate"] = "needs MineDraft's step trace"
        notes["comm_share"] = notes["mean_comm_ms"] = NO_STEPS
    steps = (counters or {}).get(STEPS)
    preemptions = (counters or {}).get(PREEMPTIONS)
    summary: dict[str, Any] = {
        "method": method,
        "k": k if speculative else None,
        "m": m,
        "requests": len(outputs),
        "makespan_s": makespan_s,
        "throughput_tok_s": rate,
        "throughput_tok_s_trim80": None,
        "throughput_tok_s_trim70": None,
        "output_tok_s": rate,
        "e2el_ms": makespan_s / len(outputs) * 1e3 if len(outputs) else None,
        "latency_ms": ms_stats(end),
        "ttft_ms": ms_stats(ttft),
        "tpot_ms": ms_stats(tpot),
        "vsr": spec["vsr"],
        "parallelization_rate": 0.0 if method == "sd" else None,
        "comm_share": None,
        "drafter_busy": None,
        "verifier_busy": None,
        "decode_steps": None,
        "prefill_steps": None,
        "mean_draft_ms": None,
        "mean_verify_ms": None,
        "mean_comm_ms": None,
        "engine": "vllm",
        "output_tokens": tokens,
        "prompt_tokens": int(sum(len(o.prompt_token_ids or ()) for o in outputs)),
        "mean_acceptance_length": spec["mean_acceptance_length"],
        "acceptance_per_pos": spec["acceptance_per_pos"],
        "num_drafts": spec["num_drafts"],
        "num_draft_tokens": spec["num_draft_tokens"],
        "num_accepted_tokens": spec["num_accepted_tokens"],
        "engine_steps": int(steps) if steps is not None else None,
        "preemptions": int(preemptions) if preemptions is not None else None,
    }
    summary.update(extra or {})
    summary["notes"] = notes
    return summary
