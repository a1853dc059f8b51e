"""The Batch Manager against hand-worked sequences of MineDraft's scheduler patch."""

from __future__ import annotations

from psdsim.sim.batches import BatchManager


def test_before_decoding_assign_alternates_by_balance():
    bm = BatchManager()
    flags = [bm.assign() for _ in range(5)]
    assert flags == [True, False, True, False, True]
    assert bm.balance == -1  # #False - #True = 2 - 3


def test_after_decoding_new_requests_join_not_skip():
    bm = BatchManager()
    for _ in range(4):
        bm.assign()
    bm.decode_scheduled()            # first decode: starts alternation, skip stays False
    assert (bm.decoding, bm.skip) == (True, False)
    assert bm.assign() is True       # not skip
    assert bm.balance == -1
    bm.decode_scheduled()            # second decode: skip flips
    assert bm.skip is True
    assert bm.assign() is False
    assert bm.balance == 0


def test_recycle_undoes_contribution_and_balance_is_preserved_not_restored():
    bm = BatchManager()
    flags = [bm.assign() for _ in range(4)]  # T F T F, balance 0
    bm.decode_scheduled()
    bm.decode_scheduled()                    # skip = True: next refill joins False
    bm.recycle(flags[0])                     # a True request finishes: balance +1
    assert bm.balance == 1
    assert bm.assign() is False              # refill goes to not skip = False, not to True
    assert bm.balance == 2                   # the hole in True is not refilled: imbalance stays


def test_reset_clears_state():
    bm = BatchManager()
    bm.assign()
    bm.decode_scheduled()
    bm.decode_scheduled()
    bm.reset()
    assert (bm.balance, bm.skip, bm.decoding) == (0, False, False)
    assert bm.assign() is True
