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
    assert (bm.decoding, bm.verify_flag) == (True, False)
    assert bm.assign() is True       # not skip
    assert bm.balance == -1
    bm.decode_scheduled()            # second decode: skip flips
    assert bm.verify_flag is True
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
    assert (bm.balance, bm.verify_flag, bm.decoding) == (0, False, False)
    assert bm.assign() is True


def test_verify_flag_is_the_sub_batch_verified_in_the_step_being_scheduled():
    """minedraft/plugin/core/scheduler.py, SchedulerPatch._schedule_running (`should_append_slot`
    skips `batch_flag == _skip_batch_flag`, then flips the flag) read with
    spec_decode/spec_decode_worker.py, ParallelSpecDecodeWorker._run_speculative_decoding_step
    (verifies `batch_flag == _send_batch_flag`, which starts True and flips after each parallel
    step): from the second decode step on, the flag the scheduler skips is the one the worker
    verifies, so `verify_flag` names the verified sub-batch and new requests join the other."""
    bm = BatchManager()
    for _ in range(4):
        bm.assign()
    send = True                        # the worker's _send_batch_flag
    bm.decode_scheduled()              # decode step 1: no flip; the worker verifies True
    send = not send
    for _ in range(5):                 # decode steps 2..6, as scheduled
        assert bm.verify_flag == send  # the scheduler skips appending for the verified batch
        assert bm.assign() is (not send)  # a newcomer joins the batch this step drafts
        bm.decode_scheduled()
        send = not send


def test_a_swapped_in_request_joins_the_sub_batch_verified_in_its_step():
    """minedraft/plugin/core/scheduler.py, SchedulerPatch._schedule_swapped: `_get_next_batch_flag`
    runs after `_schedule_running` flipped `_skip_batch_flag` for the next step, so the request
    gets `not flipped` = the flag of the sub-batch verified in this same step (no drafts for it)."""
    bm = BatchManager()
    for _ in range(4):
        bm.assign()
    bm.decode_scheduled()
    bm.decode_scheduled()              # decode steps 1, 2 done: step 3 verifies verify_flag
    verified = bm.verify_flag
    assert bm.assign_swapped_in(decodes_now=True) is verified
    assert bm.assign() is (not verified)  # a prompt admitted now would join the drafted batch
    first = BatchManager()
    for _ in range(4):
        first.assign()
    # at the first decode step nothing has flipped yet: `not False`
    assert first.assign_swapped_in(decodes_now=True) is True
    assert first.balance == -1
