"""The link's messages, tensor by tensor, worked out by hand from the code they follow
(sim/messages.py names it), and the link holding a lane for each message's latency in turn."""

from __future__ import annotations

import simpy

from psdsim.sim.devices import TO_DRAFTER, TO_VERIFIER, Link, Verifier, VerifyJob
from psdsim.sim.messages import sampler_output, step_inputs
from psdsim.sim.timeline import Timeline


def test_step_inputs_are_the_model_inputs_gpu_tensors():
    # 4 decoding requests scoring 3 positions each over 100 cached tokens, blocks of 16:
    # ids, positions, slots (int64 x 12), seq and context lengths (int32 x 4), block table
    # (100 // 16 + 4 = 10 int32), two start offsets (int32 x 5), sampled indices (int64 x 12).
    assert step_inputs(4, 12, 12, 100, 16) == (96, 96, 96, 16, 16, 40, 20, 20, 96)


def test_empty_tensors_are_not_broadcast():
    # A step that samples nothing (a prompt's middle chunk alone) has no sampled indices.
    assert step_inputs(1, 64, 0, 0, 16) == (512, 512, 512, 4, 4, 4, 8, 8)


def test_sampler_output_is_sent_tensor_by_tensor():
    vocab = 1000
    # header, ids, probabilities, log-probabilities, then the prefill hidden states' length
    assert sampler_output(6, vocab) == (16, 48, 6 * vocab * 4, 6 * vocab * 4, 8)
    # an EAGLE drafter also gets the hidden states (bf16 rows) and the prefill tokens' states
    assert sampler_output(6, vocab, hidden=32, prefill_tokens=10) == (
        16, 48, 24_000, 24_000, 6 * 32 * 2, 8, 10 * 32 * 2)
    # compact (a what-if): ids and one probability per position
    assert sampler_output(6, vocab, compact=True) == (16, 48, 24, 8)
    # nothing sampled: one 8-byte "nothing"
    assert sampler_output(0, vocab) == (8,)


def test_a_transfer_holds_its_lane_for_every_message_in_turn():
    env = simpy.Environment()
    tl = Timeline()
    link = Link(env, lambda n: 1.0 + n, lambda n: 2.0 + n, tl)
    assert link.seconds(TO_VERIFIER, (3, 4)) == (1.0 + 3) + (1.0 + 4)
    delay, hold = link.reserve(TO_DRAFTER, (1, 1, 1), now=0.0)
    assert delay == hold == 9.0
    delay, hold = link.reserve(TO_DRAFTER, (1,), now=5.0)   # queues behind the first
    assert (delay, hold) == (7.0, 3.0)
    assert [(s.start_s, s.end_s, s.args["bytes"], s.args["messages"]) for s in tl.slices] == [
        (0.0, 9.0, 3, 3), (9.0, 12.0, 1, 1)]


def test_the_output_leaves_when_the_driver_receives_it():
    """Verifier.book with `received_from`: the pass ends at 1 + 4 = 5, the driver posts its
    receive at 8 (it drafted until then), so the output crosses from 8 to 8 + 2 = 10; had it
    received from 3, the output would have left at the pass's end, 5."""
    for received_from, back in ((8.0, 10.0), (3.0, 7.0), (None, 7.0)):
        env = simpy.Environment()
        verifier = Verifier(env, Link(env, lambda n: 1.0, lambda n: 2.0))
        job = VerifyJob(4.0, inputs=(1,), output=(1,))
        assert verifier.book(job, 0.0, received_from) == back
        assert (job.inputs_s, job.output_s) == (1.0, 2.0)
