"""One record per engine step; the run's step table is built from them at the end.

A method's step fills a `StepStats` by field name as it goes (the target-pass helper its verify,
link and wait figures, the outcome its token counts, ...); `StepRecord` adds what the plan and
the running set say and is built by keyword (sim/methods/common.record). A new column is one
field here, with its default, and one assignment where it is measured.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
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
    prefill_groups: int     # prompts scheduled, computed or not (vLLM's num_prefill_groups)
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
    # the engine's named terms (sim/execution.py; 0 under the roofline engine)
    prep_s: float = 0.0     # driver input prep before drafting (MineDraft), a part of draft_s
    framework_s: float = 0.0  # per-step scheduling and output processing on the critical path
    extra_rows: int = 0     # draft rows for requests whose drafts were all accepted (vLLM V0)
    verify_prep_s: float = 0.0  # the verifier's input prep (MineDraft: rank 1's rebuild), in verify_s
    timer_s: float = 0.0    # Timer synchronize() calls (MineDraft), in verify_s
    sample_s: float = 0.0   # full-vocab logits gathered to the first rank and sampled, in verify_s


STEP_COLUMNS = StepRecord._fields


@dataclass(slots=True)
class StepStats:
    """What a method measured in one step, filled in by name as the step goes. Each field is the
    step-table column of the same name; `batch0` None means every decoding request of the running
    set (the methods without sub-batches). `drafter_s` is the drafter GPU time of the step's own
    work (a ring's background drafting is charged by the drafters, sim/devices.Drafter)."""

    parallelised: bool = False
    batch0: int | None = None
    batch1: int = 0
    verified: int = 0
    drafted: int = 0
    scored: int = 0
    proposed: int = 0
    accepted: int = 0
    generated: int = 0
    unproposed: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0
    comm_s: float = 0.0
    wait_s: float = 0.0
    link_critical_s: float = 0.0
    swap_s: float = 0.0
    drafter_s: float = 0.0
    prep_s: float = 0.0
    framework_s: float = 0.0
    extra_rows: int = 0
    verify_prep_s: float = 0.0
    timer_s: float = 0.0
    sample_s: float = 0.0


# the StepStats fields that are step-table columns (batch0 is resolved by the recorder)
STAT_COLUMNS = tuple(f.name for f in fields(StepStats) if f.name in STEP_COLUMNS and f.name != "batch0")


def step_table(records: list[StepRecord]) -> dict[str, np.ndarray]:
    if not records:
        return {name: np.empty(0) for name in STEP_COLUMNS}
    return {name: np.array(col) for name, col in zip(STEP_COLUMNS, zip(*records, strict=True), strict=True)}
