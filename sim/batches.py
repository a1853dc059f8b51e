"""The Batch Manager: which of PSD's two sub-batches each running request belongs to.

It mirrors MineDraft's scheduler patch (docs/reference/paper.md §4.2, `SchedulerPatch`): a request's
flag is True or False; `balance` = #False - #True; `skip` is the sub-batch the scheduler treats
as draft-only-scheduled in the coming decode step. It starts alternating one decode step after
decoding begins, in step with the worker's verified sub-batch (see sim/methods/psd.py).

- assign(): before any decode, alternate by balance so the first 2m split evenly; afterwards a
  new request joins `not skip`, the sub-batch drafted in the next decode step, so that it has
  drafts before its first verification.
- assign(balanced=True): the balance rule even after decoding has started. MineDraft takes this
  branch for prefills scheduled in a mixed (chunked-prefill) batch; the `rebalance` option takes
  it always (the mitigation the paper proposes: refills restore the balance, at the price of
  requests that meet their first verification without drafts).
- recycle(): on finish, abort and preemption undo the request's contribution.
- Finishes happen only in the verified sub-batch, which is drafted next, so refills land where
  the holes are: balance is preserved, never restored.
"""

from __future__ import annotations


class BatchManager:
    def __init__(self) -> None:
        self.balance = 0
        self.skip = False
        self.decoding = False

    def assign(self, balanced: bool = False) -> bool:
        """The flag of a newly admitted (or swapped-in) request."""
        if self.decoding and not balanced:
            self.balance += 1 if self.skip else -1
            return not self.skip
        if self.balance >= 0:
            self.balance -= 1
            return True
        self.balance += 1
        return False

    def recycle(self, flag: bool) -> None:
        """A request with `flag` left the running set."""
        self.balance += 1 if flag else -1

    def decode_scheduled(self) -> None:
        """Called once per scheduled decode step (after its batch is fixed)."""
        if self.decoding:
            self.skip = not self.skip
        else:
            self.decoding = True

    def reset(self) -> None:
        """Nothing is running: start afresh (MineDraft resets when `running` empties)."""
        self.balance = 0
        self.skip = False
        self.decoding = False
