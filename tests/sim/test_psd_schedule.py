"""PSD's step structure on hand-built cases with constant costs (times worked out by hand)."""

from __future__ import annotations

import numpy as np
import pytest

from psdsim.sim.costs import ConstantCost
from psdsim.sim.run import simulate
from tests.helpers.scenarios import decode_rows, small

DRAFT, VERIFY, COMM, REJECT, OVERHEAD, PREFILL = 3.0, 5.0, 1.0, 0.5, 0.25, 2.0
# COMM is one message's cost. "one-message": each way is one message, the output leaving when the
# pass ends. "per-tensor" (MineDraft): a decode step's inputs are 9 broadcasts (ids, positions,
# slots, sequence and context lengths, block table, two start offsets, sampled indices) and its
# output 5 sends (header, ids, probabilities, log-probabilities, prefill length), received once
# the driver has drafted (sim/messages.py).
ONE = {"transfers": "one-message"}
INPUTS, OUTPUT = 9, 5


def _run(**changes):
    cost = ConstantCost(DRAFT, VERIFY, prefill_s=PREFILL, comm_s=COMM, reject_s=REJECT,
                        overhead_s=OVERHEAD)
    s = small(method="psd", requests=4, m=2, k=2, output_len=60, **{**ONE, **changes})
    return simulate(s, cost=cost)


def test_prefill_then_init_then_parallel_steps():
    r = _run()
    st = r.steps
    # One prefill step admits all 2m = 4 requests: inputs out, target prefill, output back.
    assert st["kind"][0] == "prefill" and st["prompts_done"][0] == 4
    assert st["end_s"][0] - st["start_s"][0] == pytest.approx(COMM + PREFILL + COMM + OVERHEAD)
    d = decode_rows(st)
    dur = st["end_s"][d] - st["start_s"][d]
    # Init step: draft the verified sub-batch first, then verify it while drafting the other.
    assert not st["parallelised"][d[0]]
    assert dur[0] == pytest.approx(DRAFT + max(DRAFT, COMM + VERIFY + COMM) + REJECT + OVERHEAD)
    # Steady state: PSD step = max(draft, comm + verify + comm) + rejection + overhead.
    assert st["parallelised"][d[1:5]].all()
    assert dur[1:5] == pytest.approx(max(DRAFT, COMM + VERIFY + COMM) + REJECT + OVERHEAD)
    assert (st["verified"][d[:5]] == 2).all() and (st["drafted"][d[:5]] == 2).all()
    # The drafter waits for the verifier's output: comm + verify + comm - draft.
    assert st["wait_s"][d[1]] == pytest.approx(COMM + VERIFY + COMM - DRAFT)
    assert st["link_critical_s"][d[1]] == pytest.approx(2 * COMM)


def test_drafting_longer_than_verification_sets_the_step():
    """One message each way, the output sent when the pass ends: it is back before the drafting
    is done, and the link costs the step nothing."""
    cost = ConstantCost(12.0, VERIFY, comm_s=COMM, reject_s=REJECT, overhead_s=OVERHEAD)
    r = simulate(small(method="psd", requests=4, m=2, k=2, output_len=60, **ONE), cost=cost)
    d = decode_rows(r.steps)
    dur = r.steps["end_s"][d] - r.steps["start_s"][d]
    assert dur[1:5] == pytest.approx(12.0 + REJECT + OVERHEAD)
    assert r.steps["wait_s"][d[1]] == pytest.approx(0.0)
    assert r.steps["link_critical_s"][d[1]] == pytest.approx(0.0)


def test_drafting_longer_the_output_crosses_after_the_drafting():
    """MineDraft's driver receives the sampler output only once it has drafted the other batch
    (spec_decode_worker.py, ParallelSpecDecodeWorker: start_score_proposals, get_spec_proposals of
    the other batch, then score_proposals -> _recv_sampler_output_from_repr_scorer, one recv per
    tensor), and a point-to-point send moves once the receive is posted: where drafting is the
    longer side, the whole output crosses after it, on the critical path."""
    drafting = 20.0
    assert drafting > INPUTS * COMM + VERIFY
    cost = ConstantCost(drafting, VERIFY, comm_s=COMM, reject_s=REJECT, overhead_s=OVERHEAD)
    r = simulate(small(method="psd", requests=4, m=2, k=2, output_len=60), cost=cost)
    d = decode_rows(r.steps)
    dur = r.steps["end_s"][d] - r.steps["start_s"][d]
    assert r.steps["parallelised"][d[1:5]].all()
    assert dur[1:5] == pytest.approx(drafting + OUTPUT * COMM + REJECT + OVERHEAD)
    assert r.steps["wait_s"][d[1]] == pytest.approx(OUTPUT * COMM)     # the drafter receiving
    assert r.steps["link_critical_s"][d[1]] == pytest.approx(OUTPUT * COMM)
    assert r.steps["comm_s"][d[1]] == pytest.approx((INPUTS + OUTPUT) * COMM)


def test_drafting_shorter_each_tensor_pays_its_latency():
    """Drafting shorter than the pass: the output leaves when the pass ends, as before, but the
    inputs' 9 broadcasts and the output's 5 sends each pay a message's cost."""
    r = _run(transfers="per-tensor")
    d = decode_rows(r.steps)
    dur = r.steps["end_s"][d] - r.steps["start_s"][d]
    link = (INPUTS + OUTPUT) * COMM
    assert link + VERIFY > DRAFT
    assert dur[1:5] == pytest.approx(link + VERIFY + REJECT + OVERHEAD)
    assert r.steps["wait_s"][d[1]] == pytest.approx(link + VERIFY - DRAFT)
    assert r.steps["link_critical_s"][d[1]] == pytest.approx(link)


def test_sub_batches_alternate():
    r = _run()
    d = decode_rows(r.steps)[:6]
    # The verified sub-batch alternates; each holds m = 2 of the 2m = 4 running requests.
    assert (r.steps["batch0"][d] == 2).all() and (r.steps["batch1"][d] == 2).all()


def test_fallback_when_one_sub_batch_empties():
    """After one sub-batch empties, the next step verifies proposals drafted earlier with nothing
    drafted ahead (still parallelised); later steps draft then verify: sequential SD."""
    cost = ConstantCost(DRAFT, VERIFY, comm_s=COMM, reject_s=REJECT, overhead_s=OVERHEAD)
    s = small(method="psd", requests=2, m=1, k=2, output_len=40, acceptance=0.5,
              acceptance_spread=2.0, seed=3, **ONE)
    r = simulate(s, cost=cost)
    st = r.steps
    d = decode_rows(st)
    one_empty = d[(st["batch0"][d] == 0) | (st["batch1"][d] == 0)]
    assert len(one_empty) >= 3, "the scenario must leave one request running alone"
    first, rest = one_empty[0], one_empty[1:]
    assert st["parallelised"][first] and st["drafted"][first] == 0
    assert not st["parallelised"][rest].any()
    sequential = DRAFT + COMM + VERIFY + COMM + REJECT + OVERHEAD
    assert np.allclose(st["end_s"][rest] - st["start_s"][rest], sequential)


def test_each_change_of_a_sub_batchs_members_is_counted():
    """What PSD keeps of a sub-batch (its running context) is valid for the members counted
    in `changes`, not for whichever array happens to hold them."""
    from psdsim.sim.methods.sub_batching import RoundRobinSubBatching
    from psdsim.sim.requests import DECODING, FINISHED

    ring = RoundRobinSubBatching(8, 3)
    slots = np.array([0, 1, 2])
    ring.admitted(slots, mixed=False, restart=True)
    ring.graduated(slots)
    joined = list(ring.changes)
    assert sum(joined) == 3 and all(len(m) == 1 for m in ring.members)
    state = np.full(8, DECODING)
    state[1] = FINISHED
    b = int(ring.flag[1])
    ring.left(np.array([1]), state)
    assert ring.changes[b] == joined[b] + 1 and not len(ring.members[b])
    assert [c for i, c in enumerate(ring.changes) if i != b] == [c for i, c in enumerate(joined) if i != b]


@pytest.mark.parametrize("changes", [{}, {"sub_batches": 3, "drafters": 2},
                                     {"rate": 30.0, "abort_fraction": 0.3}])
def test_psds_running_context_is_always_the_sum_of_its_members(monkeypatch, changes):
    from psdsim.sim.methods.pipelined import PipelinedSD

    checked = []
    kept = PipelinedSD._context

    def checking(self, b):
        context = kept(self, b)
        assert context == self.sim.table.context(self.sub_batching.members[b])
        checked.append(b)
        return context

    monkeypatch.setattr(PipelinedSD, "_context", checking)
    simulate(small(requests=30, **changes))
    assert checked
