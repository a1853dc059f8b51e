"""The Batch Manager: which of PSD's two sub-batches each running request belongs to.

It mirrors MineDraft's scheduler patch (docs/reference/paper.md §4.2, `SchedulerPatch` in
minedraft/plugin/core/scheduler.py): a request's flag is True or False; `balance` = #False -
#True; `verify_flag` is the patch's `_skip_batch_flag`: the sub-batch the decode step being
scheduled *verifies* (its slot appending is what the patch skips), so `not verify_flag` is the
sub-batch that step *drafts*, the one new requests join. (Read together, `_schedule_running`
flips the flag after each decode step and the worker's `_send_batch_flag` picks the verified
sub-batch; the patch's own `has_scoring` name for `flag != skip` says the opposite, and is
wrong from the second decode step on.) The flag starts flipping one decode step after decoding
begins: at the first decode step every request appends and the worker verifies the True
sub-batch whatever the flag says.

- assign(): before any decode, alternate by balance so the first 2m split evenly; afterwards a
  new request joins `not verify_flag`, the sub-batch drafted in the next decode step, so that it
  has drafts before its first verification (`_get_next_batch_flag`).
- assign(balanced=True): the balance rule even after decoding has started. MineDraft takes this
  branch for prefills scheduled in a mixed (chunked-prefill) batch; the `rebalance` option takes
  it always (the mitigation the paper proposes: refills restore the balance, at the price of
  requests that meet their first verification without drafts).
- assign_swapped_in(): the flag `_schedule_swapped` gives, which runs after `_schedule_running`
  has flipped the flag for the *next* step: the request joins the sub-batch verified in this
  very step, which holds no drafts for it (scenario `swap_in_batch = "verified"`).
- assign(lighter=flag): where the balance rule applies, join the sub-batch named `lighter`
  instead of the one with fewer requests (scenario `balance_by = "kv"`: the sub-batch whose
  requests hold fewer KV tokens; None when both hold as many, and the count decides). The paper
  names balance by request count alone, while requests differ in KV, among its limits (§A):
  a sub-batch of long contexts verifies and drafts slower than one of short ones.
- recycle(): on finish, abort and preemption undo the request's contribution.
- Finishes happen only in the verified sub-batch, which is drafted next, so refills land where
  the holes are: balance is preserved, never restored.
"""

from __future__ import annotations


class BatchManager:
    def __init__(self) -> None:
        self.balance = 0
        self.verify_flag = False  # MineDraft's _skip_batch_flag
        self.decoding = False     # MineDraft's _has_scheduled_decoding

    def assign(self, balanced: bool = False, lighter: bool | None = None) -> bool:
        """The flag of a newly admitted request (or a swapped-in one, in the what-if that sends
        it to the sub-batch drafted next)."""
        if self.decoding and not balanced:
            return self._join(not self.verify_flag)
        if lighter is not None:
            return self._join(lighter)
        if self.balance >= 0:
            return self._join(True)
        return self._join(False)

    def assign_swapped_in(self, decodes_now: bool) -> bool:
        """The flag MineDraft's `_schedule_swapped` gives a request swapped in during the decode
        step being scheduled (`decodes_now`: that step schedules running decodes). It runs after
        `_schedule_running`, which has already flipped the flag (or, at the first decode step,
        set `_has_scheduled_decoding`), so `not flag` is this step's verified sub-batch."""
        if self.decoding:
            return self._join(self.verify_flag)  # not (the flag flipped for the next step)
        if decodes_now:
            return self._join(True)  # first decode step: no flip yet, `not False`
        return self.assign()

    def _join(self, flag: bool) -> bool:
        self.balance += -1 if flag else 1
        return flag

    def recycle(self, flag: bool) -> None:
        """A request with `flag` left the running set."""
        self.balance += 1 if flag else -1

    def decode_scheduled(self) -> None:
        """Called once per scheduled decode step (after its batch is fixed)."""
        if self.decoding:
            self.verify_flag = not self.verify_flag
        else:
            self.decoding = True

    def reset(self) -> None:
        """Nothing is running: start afresh (MineDraft resets when `running` empties)."""
        self.balance = 0
        self.verify_flag = False
        self.decoding = False
