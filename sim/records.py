"""One record per engine step; the run's step table is built from them at the end."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

PREFILL = "prefill"
DECODE = "decode"


class StepRecord(NamedTuple):
    """A record of one step (a NamedTuple: cheap to create and to turn into columns)."""

    kind: str               # PREFILL or DECODE
    start_s: float
    end_s: float
    parallelised: bool      # verification overlapped drafting drafted in an earlier step
    running: int            # requests running at the start of the step
    batch0: int             # running requests in sub-batch False (PSD) / all running (SD, AR)
    batch1: int             # running requests in sub-batch True (PSD) / 0
    verified: int           # requests verified (decode) or prefilled (prefill)
    drafted: int            # requests drafted for a later step, overlapped with verification
    tokens_in: int          # target tokens processed: prompt tokens, or scored positions
    proposed: int           # draft tokens verified
    accepted: int           # draft tokens accepted
    generated: int          # tokens emitted (kept) by this step
    draft_s: float          # drafter compute in this step
    verify_s: float         # target compute in this step
    comm_s: float           # drafter<->verifier transfer time in this step
    wait_s: float           # drafter idle between finishing its drafting and the verifier's output
    link_critical_s: float  # how much shorter the step would be with a free link


STEP_COLUMNS = StepRecord._fields


def step_table(records: list[StepRecord]) -> dict[str, np.ndarray]:
    if not records:
        return {name: np.empty(0) for name in STEP_COLUMNS}
    return {name: np.array(col) for name, col in zip(STEP_COLUMNS, zip(*records, strict=True), strict=True)}
