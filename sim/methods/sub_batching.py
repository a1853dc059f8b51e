"""Which of a pipelined method's sub-batches each running request belongs to, and which
sub-batch each step verifies: the sub-batching policy of `PipelinedSD` (sim/methods/pipelined.py).

`BatchManagerSubBatching` is MineDraft's (2 sub-batches, docs/reference/paper.md §4.2): the scheduler's
Batch Manager (sim/batches.py) flags each admitted request; the worker verifies the decoding
sub-batch whose flag equals `send` while it drafts the other one, and flips `send`. When one
sub-batch is empty, everything is verified and nothing is drafted ahead; `send` resets to True
and the next step must draft before it verifies (not parallelised): the sequential fallback, or
tail. With `rebalance`, and for prompts admitted into a mixed (chunked-prefill) batch, refills
restore the balance instead of joining the sub-batch drafted next; a prompt that graduates into
the sub-batch verified next has no drafts yet, and its first verification is a wasted step.
Wherever the balance rule applies, `balance_by = "kv"` balances the KV tokens the sub-batches'
running requests hold (prompt + generated, prefilling ones included) instead of their count.
Where MineDraft's code differs from what it meant, the default is the code and the intention a
what-if (docs/minedraft-fidelity.md):
- KV (`kv_patch`): `has_deferred` (MineDraft's patch, `_schedule_running`'s `should_append_slot`)
  skips appending slots for a request that has decoded before and whose flag is the one verified,
  unless one sub-batch was empty in this step and the last one too. Mostly that append would
  have been a no-op (the request was drafted, not verified, in the step before), but where the
  step before verified it as well (one sub-batch empty, or the worker's flag reset) it holds fewer
  blocks than context + k until its sub-batch is next drafted; vLLM's `can_append_slots` still
  checks it (`checks_skipped`). `default` (vLLM) appends for every request; `intended` grows a
  request's KV only when its sub-batch is verified, or at its first decode (the saving the patch
  meant).
- chunked prefill (`psd_prefill_chunks`): `verified-only` computes a prompt chunk only in its
  sub-batch's verify pass (the worker sends the other sub-batch's prompts to the proposer, which
  runs nothing for them); `every-pass` computes every planned chunk.
- swap-in (`swap_in_batch`): `verified` puts a swapped-in request in the sub-batch verified in
  its step (MineDraft's `_schedule_swapped` runs after the flag flipped), where it has no drafts
  and shifts the proposals of the others (`misaligned`); `drafted` puts it where newcomers go.
- a request lost from the sub-batch holding drafts (preempted, swapped out or aborted after it
  was drafted and before it is verified): MineDraft's worker masks a preempted one's proposals
  (`_track_preempted_requests`) but `_prepare_previous_proposals` compares the batch with the
  mask's length, takes its chunked-prefill branch with a negative offset and raises. psdsim
  goes on as the mask meant (the others keep their drafts) and counts the step (`lost_drafted`),
  and the run says where the code stops.

`RoundRobinSubBatching` is the ring's (N sub-batches, beyond the paper, docs/design.md §2): steps verify the
non-empty sub-batches in turn; refills join the sub-batch verified last, which is drafted next
(before any decode, the emptiest one). KV grows for every running request at every step (no
has_deferred patch). In the step table `batch0` is the verified sub-batch and `batch1` the others.
"""

from __future__ import annotations

import numpy as np

from psdsim.sim.batches import BatchManager
from psdsim.sim.numbers import isum
from psdsim.sim.records import StepRecord
from psdsim.sim.requests import DECODING, FINISHED, SWAPPED
from psdsim.sim.scenario import Scenario
from psdsim.sim.scheduler import Scheduler, StepPlan

EMPTY = np.empty(0, dtype=np.int64)


class SubBatching:
    """What both policies keep: each request's sub-batch and each sub-batch's decoding members
    (in graduation order; the verified set is always exactly one of them), and how many times
    each sub-batch's members have changed (`changes`), so that what is known of a sub-batch
    (its context) can say which members it was known for."""

    lost_drafted = 0   # requests the sub-batch verified now lost since it was drafted (MineDraft's)
    checks_skipped = False   # decodes left out of `allocating` are still checked for free blocks

    def __init__(self, requests: int, sub_batches: int, dtype: type) -> None:
        self.flag = np.zeros(requests, dtype=dtype)
        self.members = [EMPTY.copy() for _ in range(sub_batches)]
        self.changes = [0] * sub_batches

    def _set_members(self, b: int, members: np.ndarray) -> None:
        """The one way a sub-batch's members change: counted in `changes`."""
        self.members[b] = members
        self.changes[b] += 1

    def graduated(self, slots: np.ndarray) -> None:
        flags = self.flag[slots]
        for b in range(len(self.members)):
            joining = slots[flags == b]
            if len(joining):
                self._set_members(b, np.concatenate([self.members[b], joining]))

    def computes_chunks(self, prefill: np.ndarray, decode: np.ndarray) -> np.ndarray | None:
        """Which planned prompt chunks the step's target pass computes (None: all)."""
        return None

    def misaligned(self, slots: np.ndarray, parallelised: bool) -> int:
        """Verified requests whose scored drafts belong to another request (none here)."""
        return 0

    def _drop_left(self, flags: np.ndarray, state: np.ndarray) -> None:
        for b in set(flags.tolist()):  # the request states already say who left
            members = self.members[b]
            self._set_members(b, members[state[members] == DECODING])


class BatchManagerSubBatching(SubBatching):
    """MineDraft's Batch Manager and worker (see the module docstring)."""

    def __init__(self, requests: int, s: Scenario, lookahead: int,
                 scheduler: Scheduler | None = None) -> None:
        super().__init__(requests, 2, bool)
        self.batches = BatchManager()
        self.scheduler = scheduler  # its running set and their KV tokens: needed to balance by KV
        self.by_kv = s.balance_by == "kv"
        self.fresh: list[int] = []  # decoding requests not yet scheduled for a decode step
        self.send = True            # worker: the sub-batch verified next
        self.have_previous = False  # worker: proposals drafted in the last step
        self.drafted_for = np.zeros(requests, dtype=bool)  # ... the requests they were drafted for
        self.lost_since_drafted = 0   # ... and how many of those left unfinished since
        self.deferred = s.kv_patch == "intended"
        # MineDraft's skipped appends: its patch of vLLM V0's scheduler (V1 runs no such patch)
        self.checks_skipped = s.kv_patch == "has_deferred" and scheduler is not None and not scheduler.v1
        self.decoded = np.zeros(requests, dtype=bool)   # MineDraft's `_has_deferred_skip`
        self.one_empty = False        # ... `_is_one_batch_empty` of the step being planned
        self.after_one_empty = False  # ... `_after_first_one_batch_empty`
        self.resumed_now: list[int] = []   # swapped in while the coming step was planned
        self.every_pass = s.psd_prefill_chunks == "every-pass"
        self.swap_in_verified = s.swap_in_batch == "verified"
        self.swapped_in = EMPTY     # requests swapped in while the coming step was planned
        self.rebalance = s.rebalance
        self.lookahead = lookahead
        self.draining = False       # draft nothing beside the pass (the adaptive mode leaving PSD)

    def _verified_flag(self) -> bool | None:
        """The flag of the sub-batch the coming decode step verifies (None: nothing decodes)."""
        if len(self.members[self.send]):
            return self.send
        if len(self.members[not self.send]):
            return not self.send  # one sub-batch empty: the other is verified whole
        return None

    # -- scheduler hooks --------------------------------------------------------------------

    def allocating(self, decode: np.ndarray) -> np.ndarray | None:
        if self.checks_skipped:
            return self._appending(decode)
        if not self.deferred:
            return None
        verified = self._verified_flag()
        slots = self.members[verified] if verified is not None else EMPTY
        if self.fresh:  # a request's first decode step always allocates
            slots = np.union1d(slots, np.array(self.fresh, dtype=np.int64))
        return slots

    def _appending(self, decode: np.ndarray) -> np.ndarray | None:
        """MineDraft's `should_append_slot`: a decode appends unless it has decoded before
        (`_has_deferred_skip`) and its flag is the verified one (`_skip_batch_flag`); every one
        appends when the running requests' flags are all one (`_is_one_batch_empty`, read before
        any preemption) for the second step running. None: all of them."""
        assert self.scheduler is not None, "MineDraft's skip reads the scheduler's running set"
        running = self.scheduler.running
        ones = int(np.count_nonzero(self.flag[running]))
        self.one_empty = len(running) > 0 and ones in (0, len(running))
        if self.one_empty and self.after_one_empty:
            return None
        appends = ~self.decoded[decode] | (self.flag[decode] != self.batches.verify_flag)
        return None if appends.all() else decode[appends]

    def target_tokens(self, slots: np.ndarray) -> np.ndarray | None:
        verified = self.flag[slots] == self._verified_flag()
        return np.where(verified, 1 + self.lookahead, 0)

    def computes_chunks(self, prefill: np.ndarray, decode: np.ndarray) -> np.ndarray | None:
        """MineDraft's worker computes a prompt chunk only when its sub-batch is the verified one
        (`_split_batched_requests`). When the other sub-batch has no decoding request the step
        verifies everything (the fallback) and every chunk rides along: psdsim alternates on the
        decoding members only, so a prompt left out then might wait forever."""
        if self.every_pass or not len(decode):
            return None
        v = self._verified_flag()
        if v is None or not len(self.members[not v]):
            return None
        return self.flag[prefill] == v

    def admitted(self, slots: np.ndarray, mixed: bool, restart: bool) -> None:
        if restart:  # nothing was running before
            self.batches.reset()
            self.after_one_empty = False
        self.flag[slots] = self._assign(slots, mixed or self.rebalance)

    def graduated(self, slots: np.ndarray) -> None:
        super().graduated(slots)
        self.fresh.extend(slots.tolist())

    def resumed(self, slots: np.ndarray) -> None:
        if self.swap_in_verified and not self.rebalance:
            decodes_now = bool(len(self.members[False]) or len(self.members[True]))
            self.flag[slots] = [self.batches.assign_swapped_in(decodes_now) for _ in range(len(slots))]
            self.swapped_in = np.concatenate([self.swapped_in, slots])
        else:
            self.flag[slots] = self._assign(slots, self.rebalance)
        self.resumed_now.extend(slots.tolist())
        self.graduated(slots)

    def _assign(self, slots: np.ndarray, balanced: bool) -> list[bool]:
        """The Batch Manager's flags for `slots`, in order. Balancing by KV names the lighter
        sub-batch for each: the KV tokens of the other running requests per flag, plus those of
        the `slots` already placed."""
        if not self.by_kv:
            return [self.batches.assign(balanced) for _ in range(len(slots))]
        assert self.scheduler is not None, "balancing by KV reads the scheduler's running set"
        running, kv = self.scheduler.running, self.scheduler.table.kv_len
        others = running[~np.isin(running, slots)]
        on = self.flag[others]
        held = [isum(kv[others[~on]]), isum(kv[others[on]])]  # False, True
        flags = []
        for r in slots.tolist():
            lighter = None if held[0] == held[1] else held[1] < held[0]
            flag = self.batches.assign(balanced, lighter)
            held[flag] += int(kv[r])
            flags.append(flag)
        return flags

    def misaligned(self, slots: np.ndarray, parallelised: bool) -> int:
        """Requests swapped in this step among the verified `slots` (at their end, in MineDraft's
        scheduled order). When the step scores drafts made a step earlier, the worker's
        `_prepare_previous_proposals` meets a batch longer than its proposals and takes its
        chunked-prefill branch: the first that many requests get none and each other request the
        proposals of the one that many places before it."""
        swapped, self.swapped_in = self.swapped_in, EMPTY
        if not parallelised or not len(swapped):
            return 0
        return int(np.isin(slots, swapped).sum())

    def left(self, slots: np.ndarray, state: np.ndarray) -> None:
        flags = self.flag[slots]
        if self.have_previous:   # requests the held drafts were made for, preempted or aborted
            held = self.drafted_for[slots]
            self.lost_since_drafted += int(np.count_nonzero(held & (state[slots] != FINISHED)))
            self.drafted_for[slots] = False
        for flag in flags.tolist():
            self.batches.recycle(flag)
        self.decoded[slots[state[slots] != SWAPPED]] = False   # a swap-out keeps its mark
        self._drop_left(flags, state)
        if self.fresh:
            gone = set(slots.tolist())
            self.fresh = [r for r in self.fresh if r not in gone]

    # -- the worker -------------------------------------------------------------------------

    def turn(self, plan: StepPlan, rec: StepRecord) -> tuple[int | None, int | None]:
        """(the sub-batch this step verifies, the one it drafts ahead); None: none. While
        `draining`, nothing is drafted ahead: the step verifies the drafts in flight, as the step
        after one sub-batch empties does."""
        sizes = rec.batch0, rec.batch1 = len(self.members[0]), len(self.members[1])
        if not len(plan.decode):  # a prefill-only step: the decoding requests wait
            return None, None
        v = int(self.send)
        if not sizes[v]:  # one sub-batch empty: verify all, draft nothing ahead
            v = 1 - v
            if not sizes[v]:
                return None, None
        if self.checks_skipped:
            self._decode_scheduled(plan.decode)
        self.batches.decode_scheduled()
        self.fresh.clear()
        # MineDraft's worker cannot verify a sub-batch that lost requests since it was drafted:
        # `_track_preempted_requests` masks a preempted request's proposals, but
        # `_prepare_previous_proposals` compares the batch with the mask's length, not its count,
        # so a shorter batch takes the chunked-prefill branch with a negative offset, whose
        # `new_mask[non_spec_len:] = mask` raises (an aborted request is not even masked)
        self.lost_drafted = self.lost_since_drafted if self.have_previous and v == int(self.send) else 0
        return v, 1 - v if sizes[1 - v] and not self.draining else None

    def skip_set_left_behind(self) -> bool:
        """Whether MineDraft's engine would stop at the step being planned: once decoding has
        begun, `Scheduler._schedule` asserts `_has_deferred_skip` empty whenever the running set
        is, and a request swapped out after it decoded is still in it (docs/minedraft-fidelity.md
        §12). psdsim swaps it back in and goes on."""
        s = self.scheduler
        return (self.checks_skipped and self.batches.decoding and s is not None and not len(s.running)
                and bool(s.swapped) and bool(self.decoded[list(s.swapped)].any()))

    def _decode_scheduled(self, decode: np.ndarray) -> None:
        """What MineDraft's `_schedule_running` notes of a decode step: its decodes join
        `_has_deferred_skip` (not those `_schedule_swapped` brought back), and from the second
        decode step on whether one sub-batch was empty in it."""
        if self.batches.decoding:
            self.after_one_empty = self.one_empty
        resumed, self.resumed_now = self.resumed_now, []
        self.decoded[decode[~np.isin(decode, resumed)] if resumed else decode] = True

    def regroup(self, running: np.ndarray, state: np.ndarray) -> None:
        """Split the running requests into two sub-batches afresh by the balance rule, as before
        decoding starts, with no drafts held: the adaptive mode's switch into PSD (from SD or AR,
        or PSD's own tail once one sub-batch emptied). The next decode step drafts the sub-batch
        it verifies first (the init step)."""
        self.batches.reset()
        self.flag[running] = self._assign(running, True)
        decoding = running[state[running] == DECODING]
        for b in (0, 1):
            self._set_members(b, decoding[self.flag[decoding] == b])
        self.fresh.clear()
        self.swapped_in = EMPTY
        self.have_previous, self.send, self.draining = False, True, False

    def drafted(self, verified: int) -> bool:
        """Whether the verified sub-batch's drafts were drafted in an earlier step."""
        return self.have_previous

    def verified(self, verified: int, ahead: int | None) -> None:
        """Sub-batch `verified` is back; `ahead` holds drafts for the next step, which verifies it
        (the other one, or the verified one itself where the tail pre-drafts it); None: nothing
        is held, and the next step drafts first."""
        self.have_previous, self.send = (True, bool(ahead)) if ahead is not None else (False, True)
        self.lost_since_drafted = 0
        self.drafted_for[:] = False
        if ahead is not None:
            self.drafted_for[self.members[ahead]] = True


class RoundRobinSubBatching(SubBatching):
    """The ring's round-robin order (see the module docstring)."""

    def __init__(self, requests: int, sub_batches: int) -> None:
        super().__init__(requests, sub_batches, np.int64)
        self.flagged = np.zeros(sub_batches, dtype=np.int64)   # running requests per sub-batch
        self.last_verified: int | None = None
        self.next = 0

    def allocating(self, decode: np.ndarray) -> np.ndarray | None:
        return None

    def target_tokens(self, slots: np.ndarray) -> np.ndarray | None:
        return None

    def admitted(self, slots: np.ndarray, mixed: bool, restart: bool) -> None:
        for r in slots.tolist():
            # refills join the sub-batch drafted next; before any decode, balance the ring
            target = self.last_verified if self.last_verified is not None else int(np.argmin(self.flagged))
            self.flag[r] = target
            self.flagged[target] += 1

    def resumed(self, slots: np.ndarray) -> None:
        self.admitted(slots, False, False)
        self.graduated(slots)

    def left(self, slots: np.ndarray, state: np.ndarray) -> None:
        flags = self.flag[slots]
        for b in set(flags.tolist()):
            self.flagged[b] -= int(np.count_nonzero(flags == b))
        self._drop_left(flags, state)

    def turn(self, plan: StepPlan, rec: StepRecord) -> tuple[int | None, int | None]:
        if not len(plan.decode):
            return None, None
        n = len(self.members)
        for i in range(n):
            b = (self.next + i) % n
            if len(self.members[b]):
                return b, None
        return None, None

    def verified(self, verified: int, ahead: int | None) -> None:
        self.last_verified = verified
        self.next = (verified + 1) % len(self.members)
