"""The run's records, written as MineDraft's JSONL trace (docs/reference/paper.md §4.2) plus psdsim fields.

One line, one bundle: `{"metadata": {...}, "traces": [Step..., Request...]}`, as MineDraft's
`TRACER.export` writes it, so calibration/minedraft.py reads it unchanged. MineDraft's own fields
keep MineDraft's meanings (see that reader's docstring), notably:
- `measured_*_time` in seconds; `measured_target_time` of a PSD step that is parallelised spans
  sending the verified sub-batch, drafting the other one and waiting for the scores (the
  overlapped region), and `measured_draft_time` is 0 there (the drafting ran inside it); in a
  prompt step it holds the target's and the draft's prefill together.
- `measured_overhead_time` is the rest of the step's execution: rejection sampling and
  bookkeeping.
- `generated_num` counts every token the verification emitted (accepted + 1 per verified request)
  before truncation at the output length; `accepted_num` the accepted draft tokens.

psdsim's fields, `psdsim_*`, carry what MineDraft's lack and the cost model needs:
- psdsim_verify_batch, psdsim_verify_context_tokens: requests the target scored (prompt steps:
  prompts) and the tokens already in their target KV cache before the pass;
- psdsim_draft_sync_{batch,context_tokens,time}: drafting that ran before the target pass (SD
  every step; PSD's init and fallback steps), its requests, the tokens in their draft KV cache
  when drafting began, and its seconds;
- psdsim_draft_ahead_{batch,context_tokens,time}: drafting overlapped with the target pass (PSD's
  other sub-batch, PEARL's drafts ahead);
- psdsim_target_time: the target pass alone, timed in the process that ran it;
- psdsim_send_{time,bytes}, psdsim_return_{time,bytes}: the driver<->verifier channel (absent when
  the target runs in the driver's process);
- psdsim_wait_time: the driver idle between the end of its drafting and the verifier's output;
- psdsim_reject_time: rejection sampling (part of measured_overhead_time);
- psdsim_draft_prefill_time: the draft model's prompt pass (part of a prompt step's
  measured_target_time);
- psdsim_kept_num: tokens kept after truncation at the output length (the throughput counts
  generated_num, as MineDraft's analysis does);
- psdsim_batch0, psdsim_batch1: PSD's decoding sub-batch sizes (flag False, True) at the start.
Request records add psdsim_first_token_us.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psdsim.engine.reference.schedule import Request
from psdsim.sim.output.atomic_writes import write_file


@dataclass
class StepRecord:
    index: int
    start_s: float = 0.0
    end_s: float = 0.0
    batch_start_s: float = 0.0
    batch_end_s: float = 0.0
    prompts: int = 0                      # prefill groups (0: a decode step)
    requests: list[str] = field(default_factory=list)
    speculative: bool = False             # took the draft-verify path (not AR)
    parallelised: bool = False
    k: int = 0
    verify_len: int = 0
    accepted: int = 0
    generated: int = 0
    kept: int = 0
    tokens: int = 0                       # tokens the target computed
    draft_s: float = 0.0                  # measured_draft_time
    target_s: float = 0.0                 # measured_target_time
    overhead_s: float = 0.0               # measured_overhead_time
    verify_batch: int = 0
    verify_ctx: int = 0
    draft_sync_batch: int = 0
    draft_sync_ctx: int = 0
    draft_sync_s: float = 0.0
    draft_ahead_batch: int = 0
    draft_ahead_ctx: int = 0
    draft_ahead_s: float = 0.0
    target_compute_s: float = 0.0
    send_s: float | None = None
    send_bytes: int | None = None
    return_s: float | None = None
    return_bytes: int | None = None
    wait_s: float = 0.0
    reject_s: float = 0.0
    draft_prefill_s: float = 0.0
    batches: tuple[int, int] | None = None

    @property
    def decode(self) -> bool:
        return self.prompts == 0

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    def to_json(self) -> dict[str, Any]:
        rec: dict[str, Any] = {
            "tid": f"Step:{self.index}", "type": "Step",
            "start_us": _us(self.start_s), "end_us": _us(self.end_s),
            "batch_start_us": _us(self.batch_start_s), "batch_end_us": _us(self.batch_end_s),
            "is_prompt_run": self.prompts, "batched_token_num": self.tokens,
            "batched_requests": self.requests, "is_parallelised": self.parallelised,
            "generated_num": self.generated,
            "measured_target_time": self.target_s, "measured_overhead_time": self.overhead_s,
            "psdsim_verify_batch": self.verify_batch,
            "psdsim_verify_context_tokens": self.verify_ctx,
            "psdsim_target_time": self.target_compute_s,
            "psdsim_kept_num": self.kept,
        }
        if self.decode and self.speculative:
            rec.update({
                "proposed_len": self.k, "verify_len": self.verify_len, "accepted_num": self.accepted,
                "measured_draft_time": self.draft_s,
                "psdsim_draft_sync_batch": self.draft_sync_batch,
                "psdsim_draft_sync_context_tokens": self.draft_sync_ctx,
                "psdsim_draft_sync_time": self.draft_sync_s,
                "psdsim_draft_ahead_batch": self.draft_ahead_batch,
                "psdsim_draft_ahead_context_tokens": self.draft_ahead_ctx,
                "psdsim_draft_ahead_time": self.draft_ahead_s,
                "psdsim_reject_time": self.reject_s,
            })
        if not self.decode:
            rec["psdsim_draft_prefill_time"] = self.draft_prefill_s
        if self.send_s is not None:
            rec.update({"psdsim_send_time": self.send_s, "psdsim_send_bytes": self.send_bytes,
                        "psdsim_return_time": self.return_s, "psdsim_return_bytes": self.return_bytes,
                        "psdsim_wait_time": self.wait_s})
        if self.batches is not None:
            rec["psdsim_batch0"], rec["psdsim_batch1"] = self.batches
        return rec


def request_json(r: Request, start_s: float) -> dict[str, Any]:
    return {"tid": r.tid, "type": "Request", "start_us": _us(start_s), "end_us": _us(r.end_s),
            "prompt_len": len(r.prompt), "gen_len": r.generated,
            "psdsim_first_token_us": _us(r.first_token_s)}


def write_jsonl(path: Path, metadata: dict[str, Any], steps: list[StepRecord], requests: list[Request],
                start_s: float) -> None:
    """One bundle line, written atomically (temp file + rename)."""
    bundle = {"metadata": metadata,
              "traces": [s.to_json() for s in steps] + [request_json(r, start_s) for r in requests]}
    write_file(path, json.dumps(bundle) + "\n")


def _us(seconds: float) -> int:
    return round(seconds * 1e6)
