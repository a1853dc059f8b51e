"""One record per engine step; the run's step table is built from them at the end.

A method's step fills its `StepRecord` by field name as it goes (the target-pass helper its
verify and link figures, the outcome its token counts, ...) and sim/methods/common.record adds
what the plan and the running set say. A field left alone keeps its class default. A new column
is one annotated line here, with its default, and one assignment where it is measured.
"""

from __future__ import annotations

from operator import attrgetter

import numpy as np

PREFILL = "prefill"
DECODE = "decode"


class StepRecord:
    """A record of one step. Plain class attributes are the defaults, so that a step's record
    costs only the fields it sets; a run keeps `row(record)`, the values in column order."""

    kind: str = PREFILL         # DECODE if any request decoded (chunks may ride along), else PREFILL
    start_s: float = 0.0
    end_s: float = 0.0
    parallelised: bool = False  # verification overlapped drafting drafted in an earlier step
    running: int = 0            # requests in the running set (decoding + prefilling)
    batch0: int | None = None   # decoding requests in PSD's verified / False sub-batch; None: all decoding
    batch1: int = 0             # decoding requests in PSD's other / True sub-batch(es); 0 for SD, AR
    prefilling: int = 0         # running requests still prefilling
    verified: int = 0           # requests verified (scored by the target)
    drafted: int = 0            # requests drafted for a later step, overlapped with verification
    scored: int = 0             # target positions scored for decodes (proposals + 1 each)
    prefill_tokens: int = 0     # prompt tokens computed in this step
    prefill_groups: int = 0     # prompts scheduled, computed or not (vLLM's num_prefill_groups)
    prompts_done: int = 0       # prompts whose prefill completed in this step
    proposed: int = 0           # draft tokens verified
    accepted: int = 0           # draft tokens accepted
    generated: int = 0          # tokens emitted (kept) by this step, first tokens included
    unproposed: int = 0         # requests verified without drafts (a wasted speculation step)
    draft_s: float = 0.0        # drafter compute in this step
    verify_s: float = 0.0       # target compute in this step
    comm_s: float = 0.0         # drafter<->verifier transfer time in this step
    wait_s: float = 0.0         # drafter idle between finishing its drafting and the verifier's output
    link_critical_s: float = 0.0  # how much shorter the step would be with a free link
    swap_s: float = 0.0         # KV swap time in this step
    preempted: int = 0          # requests preempted while planning this step
    kv_blocks: int = 0          # KV blocks in use once the step was planned
    waiting: int = 0            # requests queued once the step was planned
    # the engine's named terms (sim/execution.py; 0 under the roofline engine)
    prep_s: float = 0.0         # driver input prep before drafting (MineDraft), a part of draft_s
    framework_s: float = 0.0    # per-step scheduling and output processing on the critical path
    extra_rows: int = 0         # draft rows for requests whose drafts were all accepted (vLLM V0)
    verify_prep_s: float = 0.0  # the verifier's input prep (MineDraft: rank 1's rebuild), in verify_s
    timer_s: float = 0.0        # Timer synchronize() calls (MineDraft), in verify_s
    sample_s: float = 0.0       # full-vocab logits gathered to the first rank and sampled, in verify_s
    # Not a column: the drafter GPU time of the step's own work, charged to the drafter when the
    # step closes (a ring's background drafting is charged by the drafters, sim/devices.Drafter).
    drafter_s = 0.0


STEP_COLUMNS = tuple(StepRecord.__annotations__)
row = attrgetter(*STEP_COLUMNS)   # a record's values in column order


def step_table(rows: list[tuple]) -> dict[str, np.ndarray]:
    if not rows:
        return {name: np.empty(0) for name in STEP_COLUMNS}
    return {name: np.array(col) for name, col in zip(STEP_COLUMNS, zip(*rows, strict=True), strict=True)}
