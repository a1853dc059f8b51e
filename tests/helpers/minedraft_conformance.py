"""MineDraft's patched scheduler (imported from a checkout named by PSDSIM_MINEDRAFT, never copied)
beside psdsim's PSD sub-batching, on the scheduler conformance harness's workloads."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from psdsim.sim.methods.sub_batching import EMPTY, BatchManagerSubBatching
from psdsim.sim.records import StepRecord
from psdsim.sim.scenario import Scenario
from psdsim.sim.scheduler import EngineHooks
from tests.helpers.scheduler_conformance import (
    ABORTS,
    OFFLINE_LOOSE,
    OFFLINE_TIGHT,
    PARALLEL,
    POISSON_LOOSE,
    POISSON_TIGHT,
    SWAP_TIGHT,
    PsdsimSide,
    StepView,
    sorted_ids,
)

K = 3            # draft tokens per step: the lookahead slots each decode holds


def kept(request: int, time: float) -> int:
    """Tokens a verified request keeps in the step starting at `time` (both sides)."""
    return 1 + (request + int(time)) % (K + 1)


@dataclass
class SubBatchView(StepView):
    """A PSD step: StepView's fields, the sub-batches, and (vLLM's side only) the skipped appends."""

    flagged: tuple[int, ...] = ()    # scheduled requests whose batch_flag is True
    verified: tuple[int, ...] = ()
    drafted: tuple[int, ...] = ()
    held: tuple[tuple[int, int], ...] = ()   # (request, GPU blocks) of each running request
    skipped: int = 0                 # decodes whose slot append MineDraft skipped (not compared)


class PsdHooks(EngineHooks):
    """The PSD method's scheduler hooks into its sub-batching, as `PipelinedSD` forwards them."""

    def __init__(self, sub_batching: BatchManagerSubBatching, side: PsdsimSide) -> None:
        self.sub_batching, self.side, self.lookahead = sub_batching, side, K
        self.checks_skipped = sub_batching.checks_skipped

    def planning(self):   # as PipelinedSD.planning notes where MineDraft's assertion stops it
        if self.side.skip_set_stop is None and self.sub_batching.skip_set_left_behind():
            self.side.skip_set_stop = self.side.steps

    def allocating(self, decode):
        return self.sub_batching.allocating(decode)

    def target_tokens(self, slots):
        return self.sub_batching.target_tokens(slots)

    def admitted(self, slots, mixed):
        restart = len(self.side.scheduler.running) == len(slots)
        self.sub_batching.admitted(slots, mixed, restart=restart)

    def graduated(self, slots):
        self.sub_batching.graduated(slots)

    def resumed(self, slots):
        self.sub_batching.resumed(slots)

    def left(self, slots):
        self.sub_batching.left(slots, self.side.table.state)


class PsdSubBatchSide(PsdsimSide):
    """psdsim's vllm-v0 scheduler under the PSD method's sub-batching, MineDraft's defaults."""

    def __init__(self, case) -> None:
        super().__init__(case)
        self.sub_batching = BatchManagerSubBatching(self.table.capacity, Scenario(method="psd", k=K),
                                                    K, self.scheduler)
        for name in ("flag", "drafted_for", "decoded"):   # as PipelinedSD has the table reset them
            self.table.track(self.sub_batching, name)
        self.hooks = PsdHooks(self.sub_batching, self)
        self.now = 0.0
        self.steps = 0                      # steps run so far
        self.skip_set_stop: int | None = None   # the step MineDraft's swap assertion would stop at

    def step(self, now: float) -> SubBatchView | None:
        self.now = now
        self._extra: dict = {}
        view = super().step(now)
        if view is None:
            return None
        self.steps += 1
        return SubBatchView(**vars(view), **self._extra)

    def _decoded(self, plan) -> None:
        """The worker's turn (`turn`), then the verified sub-batch keeps its tokens."""
        sb, t = self.sub_batching, self.table
        scheduled = np.concatenate([plan.prefill, plan.decode])
        v, ahead = sb.turn(plan, StepRecord())
        verified = sb.members[v] if v is not None else EMPTY
        drafted = sb.members[ahead] if ahead is not None else EMPTY
        requests = self._requests
        held = [(int(t.request[r]), int(self.scheduler.kv.held[r])) for r in self.scheduler.running]
        self._extra = dict(flagged=sorted_ids(requests(scheduled[sb.flag[scheduled]])),
                           verified=sorted_ids(requests(verified)), drafted=sorted_ids(requests(drafted)),
                           held=tuple(sorted(held)))
        if v is not None:
            t.emit(verified, np.array([kept(r, self.now) for r in requests(verified)], dtype=np.int64))
            sb.verified(v, ahead)


def psd_case(case):
    """A conformance workload as PSD runs it: 2m seats (m = the workload's), k lookahead slots."""
    return replace(case, max_seqs=2 * case.max_seqs, lookahead=K)


MATCHING = [psd_case(c) for c in (OFFLINE_LOOSE, POISSON_LOOSE, OFFLINE_TIGHT, POISSON_TIGHT, PARALLEL,
                                  ABORTS)]


SWAP = psd_case(SWAP_TIGHT)
