"""MineDraft's skipped slot appends (`kv_patch = "has_deferred"`), checked without vLLM.

`SchedulerPatch._schedule_running` (minedraft/plugin/core/scheduler.py) skips `_append_slots` for a
decode already in `_has_deferred_skip` whose `batch_flag` is `_skip_batch_flag` (the verified
sub-batch), unless the running flags were all one (`_is_one_batch_empty`) this step and the last.
tests/engine/test_vllm_v0_minedraft.py compares this with MineDraft's own scheduler where it is
installed; these tests pin the rule for CI, which has neither vLLM nor MineDraft.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from psdsim.sim.kv import KVPools
from psdsim.sim.methods.sub_batching import BatchManagerSubBatching
from psdsim.sim.requests import DECODING, SWAPPED, WAITING
from psdsim.sim.scenario import Scenario
from tests.helpers.minedraft_conformance import MATCHING, SWAP, K, PsdSubBatchSide
from tests.helpers.scheduler_conformance import run_side

BLOCK = 16


class ShortfallSide(PsdSubBatchSide):
    """psdsim's PSD side noting, at each decode step once it is planned, which running requests
    hold fewer blocks than their context + k slots need, and which sub-batch is verified."""

    def __init__(self, case, kv_patch: str) -> None:
        super().__init__(case)
        checks = kv_patch == "has_deferred"
        self.sub_batching.checks_skipped = self.hooks.checks_skipped = checks
        self.short: list[set[int]] = []      # per decode step: requests short of blocks
        self.verified_now: list[set[int]] = []
        self.drafted_now: list[set[int]] = []

    def _decoded(self, plan) -> None:
        t, kv = self.table, self.scheduler.kv
        running = self.scheduler.running
        if len(plan.decode):
            need = kv.blocks_for(t.kv_len[running] + K)
            self.short.append(set(self._requests(running[kv.held[running] < need])))
        super()._decoded(plan)
        if len(plan.decode):
            self.verified_now.append(set(self._extra["verified"]))
            self.drafted_now.append(set(self._extra["drafted"]))


def test_a_request_verified_twice_running_holds_fewer_blocks_until_it_is_drafted():
    """After a step that verified the whole batch (one sub-batch empty), the next verifies that
    sub-batch again and MineDraft's patch skips its appends: a request whose tokens crossed a
    block holds one block too few while it is verified, and catches up when it is drafted."""
    side = ShortfallSide(MATCHING[1], "has_deferred")   # Poisson, KV loose
    run_side(side)
    shortfalls = [(i, r) for i, short in enumerate(side.short) for r in short]
    assert shortfalls, "no request ever skipped into a shortfall"
    for i, r in shortfalls:
        assert r in side.verified_now[i] and r not in side.drafted_now[i]
        later = [j for j in range(i + 1, len(side.short)) if r in side.drafted_now[j]]
        if later:   # drafted again (not finished first): it holds what it needs then
            assert r not in side.short[later[0]]


def test_appending_for_every_request_never_falls_short():
    side = ShortfallSide(MATCHING[1], "default")
    run_side(side)
    assert not any(side.short)


def _sub_batching() -> BatchManagerSubBatching:
    return BatchManagerSubBatching(4, Scenario(method="psd", k=K, kv_patch="has_deferred"), K, None)


def test_a_swap_out_keeps_its_mark_and_a_recompute_loses_it():
    """`_preempt` recycles the flag of any victim, but only `_preempt_by_recompute` (and finishing
    or aborting) discards it from `_has_deferred_skip`."""
    sb = _sub_batching()
    sb.decoded[:] = True
    state = np.array([SWAPPED, WAITING, DECODING, DECODING])
    sb.left(np.array([0, 1]), state)
    assert sb.decoded.tolist() == [True, False, True, True]


def test_a_skipped_request_is_still_checked_against_the_free_blocks():
    """`ensure`'s `also`: a request that appends nothing still needs the blocks its append would
    touch free once the others have grown (vLLM's `can_append_slots` runs before the skip)."""
    kv = KVPools({"verifier": 4}, BLOCK, 2)
    slots = np.array([0])
    assert kv.ensure(slots, np.array([10]), K, also=3)
    kv2 = KVPools({"verifier": 4}, BLOCK, 2)
    assert not kv2.ensure(slots, np.array([10]), K, also=4)
    assert kv2.used == 0


def test_where_minedraft_would_stop_on_a_swapped_request_is_noted_only_with_swap():
    """The swap workload empties its running set with a request swapped out after it decoded,
    where MineDraft's `_schedule` assertion stops its engine (the opt-in suite checks the step
    against MineDraft's own run); preempting by recompute drops the mark, and nothing is noted."""
    swapping = PsdSubBatchSide(SWAP)
    run_side(swapping)
    assert swapping.skip_set_stop is not None
    recomputing = PsdSubBatchSide(replace(SWAP, swap_blocks=0))
    run_side(recomputing)
    assert recomputing.skip_set_stop is None
