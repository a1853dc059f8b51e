"""What a run measured, summarised under the simulator's names (docs/design.md §4 and §7).

The definitions are the simulator's (sim/metrics.py), so a measured summary and a simulated one
compare key by key: throughput = tokens decode steps generated (accepted + 1 per verified request,
before the trim at output_len: MineDraft's generated_num) / their time (prefill-only steps
excluded), also over the first 80% and 70% of decode steps; output_tok_s over the
makespan; e2el = makespan / requests; latency from arrival (the run's start: offline) to the end
of the step that emitted the last token; VSR = accepted / verified draft tokens; parallelization
rate = parallelised decode steps / decode steps; comm share = the driver's wait for the verifier
after its drafting / decode time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from psdsim.engine.reference.config import EngineConfig
from psdsim.engine.reference.schedule import Request
from psdsim.engine.reference.trace import StepRecord
from psdsim.sim.metrics import ms_stats, ratio, step_throughput


@dataclass
class EngineResult:
    config: EngineConfig
    steps: list[StepRecord]
    requests: list[Request]          # in request-id order
    start_s: float                   # the run's start (every request's arrival)
    driver_pid: int
    verifier_pid: int
    trace_path: Path | None = None
    kineto_paths: list[Path] = field(default_factory=list)

    @property
    def outputs(self) -> list[list[int]]:
        """The generated tokens of each request."""
        return [r.tokens[len(r.prompt):] for r in self.requests]

    def summary(self) -> dict[str, Any]:
        cfg = self.config
        decode = [s for s in self.steps if s.decode]
        dur = np.array([s.duration_s for s in decode])
        generated = np.array([s.generated for s in decode])
        end = np.array([r.end_s for r in self.requests])
        first = np.array([r.first_token_s for r in self.requests])
        out_len = np.array([r.generated for r in self.requests])
        makespan = float(end.max() - self.start_s)
        speculative = cfg.method != "ar"
        two = cfg.two_processes
        proposed = sum(s.verify_len for s in decode)
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(out_len > 1, (end - first) / (out_len - 1), np.nan)
        draft_s = np.array([s.draft_sync_s + s.draft_ahead_s for s in decode])
        comm_s = np.array([(s.send_s or 0.0) + (s.return_s or 0.0) for s in decode])
        drafter_s = sum(s.draft_sync_s + s.draft_ahead_s + s.draft_prefill_s + s.reject_s for s in self.steps)
        imbalance = [abs(s.batches[1] - s.batches[0]) for s in decode if s.batches is not None]
        return {
            "method": cfg.method,
            "k": cfg.k if speculative else None,
            "m": cfg.m,
            "requests": len(self.requests),
            "makespan_s": makespan,
            "throughput_tok_s": step_throughput(generated, dur, 1.0),
            "throughput_tok_s_trim80": step_throughput(generated, dur, 0.8),
            "throughput_tok_s_trim70": step_throughput(generated, dur, 0.7),
            "output_tok_s": ratio(out_len.sum(), makespan),
            "e2el_ms": makespan / len(self.requests) * 1e3,
            "latency_ms": ms_stats(end - self.start_s),
            "ttft_ms": ms_stats(first - self.start_s),
            "tpot_ms": ms_stats(tpot),
            "vsr": ratio(sum(s.accepted for s in decode), proposed) if speculative else None,
            "parallelization_rate": (ratio(sum(s.parallelised for s in decode), len(decode))
                                     if speculative else None),
            "comm_share": ratio(sum(s.wait_s for s in decode), dur.sum()) if two else None,
            "drafter_busy": ratio(drafter_s, makespan) if speculative else None,
            "verifier_busy": ratio(sum(s.target_compute_s for s in self.steps), makespan),
            "decode_steps": len(decode),
            "prefill_steps": len(self.steps) - len(decode),
            "mean_draft_ms": float(draft_s.mean() * 1e3) if speculative and len(decode) else None,
            "mean_verify_ms": float(np.mean([s.target_compute_s for s in decode]) * 1e3) if decode else None,
            "mean_comm_ms": float(comm_s.mean() * 1e3) if two and len(decode) else None,
            "imbalance_mean": float(np.mean(imbalance)) if imbalance else None,
            "imbalance_max": int(max(imbalance)) if imbalance else None,
            "driver_pid": self.driver_pid,
            "verifier_pid": self.verifier_pid,
            "trace": str(self.trace_path) if self.trace_path else None,
        }
