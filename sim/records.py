"""One record per engine step; the run's step table is built from them at the end."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

PREFILL = "prefill"
DECODE = "decode"


class StepRecord(NamedTuple):
    """A record of one step (a NamedTuple: cheap to create and to turn into columns)."""

    kind: str               # DECODE if any request decoded (chunks may ride along), else PREFILL
    start_s: float
    end_s: float
    parallelised: bool      # verification overlapped drafting drafted in an earlier step
    running: int            # requests in the running set (decoding + prefilling)
    batch0: int             # decoding requests in sub-batch False (PSD) / all decoding (SD, AR)
    batch1: int             # decoding requests in sub-batch True (PSD) / 0
    prefilling: int         # running requests still prefilling
    verified: int           # requests verified (scored by the target)
    drafted: int            # requests drafted for a later step, overlapped with verification
    scored: int             # target positions scored for decodes (proposals + 1 each)
    prefill_tokens: int     # prompt tokens computed in this step
    prompts_done: int       # prompts whose prefill completed in this step
    proposed: int           # draft tokens verified
    accepted: int           # draft tokens accepted
    generated: int          # tokens emitted (kept) by this step, first tokens included
    unproposed: int         # requests verified without drafts (a wasted speculation step)
    draft_s: float          # drafter compute in this step
    verify_s: float         # target compute in this step
    comm_s: float           # drafter<->verifier transfer time in this step
    wait_s: float           # drafter idle between finishing its drafting and the verifier's output
    link_critical_s: float  # how much shorter the step would be with a free link
    swap_s: float           # KV swap time in this step
    preempted: int          # requests preempted while planning this step
    kv_blocks: int          # KV blocks in use once the step was planned
    waiting: int            # requests queued once the step was planned


STEP_COLUMNS = StepRecord._fields


def step_table(records: list[StepRecord]) -> dict[str, np.ndarray]:
    if not records:
        return {name: np.empty(0) for name in STEP_COLUMNS}
    return {name: np.array(col) for name, col in zip(STEP_COLUMNS, zip(*records, strict=True), strict=True)}
