"""PSD's tail pre-drafted (`tail = "pre-draft"`, sim/methods/tail.py) on hand-built cases with
constant costs: the times worked out by hand, step by step."""

from __future__ import annotations

import numpy as np
import pytest

from psdsim.sim.costs import ConstantCost
from psdsim.sim.errors import ScenarioError
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario, validate
from tests.helpers.scenarios import decode_rows, small

DRAFT, VERIFY, COMM, REJECT, OVERHEAD = 3.0, 5.0, 1.0, 0.5, 0.25
K = 2
# One message each way, the output sent when the pass ends: a pass costs COMM + VERIFY + COMM.
PASS = COMM + VERIFY + COMM
AFTER = REJECT + OVERHEAD


def _run(draft_s: float = DRAFT, **changes):
    """Two requests at m = 1: one sub-batch each, until one finishes and the other runs alone."""
    cost = ConstantCost(draft_s, VERIFY, comm_s=COMM, reject_s=REJECT, overhead_s=OVERHEAD)
    fields = dict(method="psd", requests=2, m=1, k=K, output_len=40, acceptance=0.7, acceptance_spread=2.0,
                  seed=1, transfers="one-message", tail="pre-draft")
    return simulate(small(**{**fields, **changes}), cost=cost)


def _tail(steps: dict[str, np.ndarray]) -> np.ndarray:
    d = decode_rows(steps)
    return d[(steps["batch0"][d] == 0) | (steps["batch1"][d] == 0)]


def _durations(steps: dict[str, np.ndarray], rows: np.ndarray) -> np.ndarray:
    return steps["end_s"][rows] - steps["start_s"][rows]


def test_pre_drafts_accepted_hide_the_drafting_and_rejected_ones_are_drafted_again():
    """Each tail step pre-drafts the one request beside its pass (drafted = 1, draft time DRAFT).
    The step after one whose verification accepted both drafts scores the pre-drafts: max(draft,
    pass) + rejection + overhead, parallelised. After a rejection the pre-drafts are thrown away
    (K of them) and the request is drafted again before the pass: draft + max(draft, pass) + ...,
    not parallelised, its drafting twice DRAFT."""
    st = _run().steps
    tail = _tail(st)
    all_accepted = st["accepted"][tail] == st["proposed"][tail]
    assert (st["proposed"][tail] == K).all()
    assert all_accepted[:-1].any() and (~all_accepted[:-1]).any(), "the case must hold both outcomes"
    assert (st["drafted"][tail] == 1).all() and (st["verified"][tail] == 1).all()
    # the first tail step verifies drafts made beside the last two-sub-batch pass
    first, rest = tail[0], tail[1:]
    assert st["parallelised"][first]
    assert _durations(st, tail[:1]) == pytest.approx(max(DRAFT, PASS) + AFTER)
    kept = all_accepted[:-1]   # the outcome of the step before each later one
    assert (st["parallelised"][rest] == kept).all()
    assert _durations(st, rest) == pytest.approx(np.where(kept, max(DRAFT, PASS), DRAFT + max(DRAFT, PASS))
                                                 + AFTER)
    assert st["draft_s"][rest] == pytest.approx(np.where(kept, DRAFT, 2 * DRAFT))
    # thrown away: after a rejection, and at the last step (the request finished)
    wasted = np.where(all_accepted, 0, K)
    wasted[-1] = K
    assert (st["pre_drafts_wasted"][tail] == wasted).all()
    assert st["pre_drafts_wasted"].sum() == wasted.sum()


def test_pearls_answer_verifies_a_rejected_request_without_drafts():
    """tail = pre-draft-pearl on the same case: nothing is drafted before a pass, so every tail
    step costs max(draft, pass) + rejection + overhead; after a rejection the request is
    verified with 0 proposals (a wasted verification), and its pre-drafts from then are kept
    when their first token matched (the next step scores K) or thrown away (it scores 0)."""
    r = _run(tail="pre-draft-pearl")
    st = r.steps
    tail = _tail(st)
    proposed, accepted = st["proposed"][tail], st["accepted"][tail]
    assert (st["parallelised"][tail]).all() and (st["drafted"][tail] == 1).all()
    assert _durations(st, tail) == pytest.approx(max(DRAFT, PASS) + AFTER)
    assert set(proposed.tolist()) == {0, K}
    after_kept = (proposed == K) & (accepted == K)
    assert (proposed[1:][after_kept[:-1]] == K).all()        # kept: the next step scores them
    assert (proposed[1:][(proposed == K)[:-1] & ~after_kept[:-1]] == 0).all()   # rejected: none
    thrown = st["pre_drafts_wasted"][tail][:-1] == K
    assert (proposed[1:] == np.where(thrown, 0, K)).all()
    assert r.summary["wasted_verifications"] == int(np.count_nonzero(proposed == 0))


def test_the_sd_fallback_costs_draft_plus_pass_every_tail_step():
    """The default on the same case: MineDraft's sequential fallback, nothing drafted beside the
    pass and nothing thrown away."""
    r = _run(tail="sd")
    st = r.steps
    tail = _tail(st)
    assert (st["drafted"][tail] == 0).all() and not st["parallelised"][tail[1:]].any()
    assert _durations(st, tail[1:]) == pytest.approx(DRAFT + PASS + AFTER)
    assert st["pre_drafts_wasted"].sum() == 0 and r.summary["pre_drafts_wasted"] is None


def test_where_drafting_outlasts_the_pass_a_rejection_costs_more_than_the_fallback():
    """Drafting 12 s against a 7 s pass: a kept pre-draft makes the step 12 + ..., SD's 19 + ...,
    but a rejection stacks the re-draft on the pre-draft: 24 + ... ."""
    slow = 12.0
    st = _run(draft_s=slow).steps
    tail = _tail(st)
    kept = (st["accepted"][tail] == st["proposed"][tail])[:-1]
    assert kept.any() and (~kept).any()
    assert _durations(st, tail[1:]) == pytest.approx(np.where(kept, slow, 2 * slow) + AFTER)
    sd = _run(draft_s=slow, tail="sd").steps
    assert _durations(sd, _tail(sd)[1:]) == pytest.approx(slow + PASS + AFTER)


def test_a_tail_step_holds_kv_for_the_drafts_and_the_pre_drafts():
    """Block size 1: a decode holds its context + k slots, and in a tail step that pre-drafts
    context + 2k - 1 (the draft KV of the k drafts and of k - 1 pre-drafts). The first tail step
    is planned on the same history either way, so it holds k - 1 blocks more."""
    fields = dict(block_size=1, k=3)
    pre, sd = _run(**fields).steps, _run(tail="sd", **fields).steps
    first = _tail(sd)[0]
    assert _tail(pre)[0] == first
    assert pre["kv_blocks"][first] - sd["kv_blocks"][first] == 3 - 1
    assert (pre["kv_blocks"][:first] == sd["kv_blocks"][:first]).all()


def test_refills_resume_the_pipeline_from_the_pre_drafted_sub_batch():
    """Arrivals sparse enough that the running set drains to one request and refills: the step
    after a refill ends the tail verifies the sub-batch pre-drafted beside the last tail pass (it
    holds the drafts; re-drafted first if they were thrown away) and drafts the refilled one
    beside it, and the two sub-batches alternate again (the timeline's slices, by step)."""
    r = simulate(small(method="psd", requests=12, m=1, k=K, output_len=30, acceptance=0.7,
                       acceptance_spread=2.0, seed=1, transfers="one-message", tail="pre-draft", rate=0.005),
                 cost=ConstantCost(DRAFT, VERIFY, comm_s=COMM, reject_s=REJECT, overhead_s=OVERHEAD),
                 timeline=True)
    st, slices = r.steps, r.timeline.slices
    work = {(sl.args["step"], sl.name) for sl in slices}
    d = decode_rows(st)
    tail = (st["batch0"][d] == 0) | (st["batch1"][d] == 0)
    ends = np.flatnonzero(tail[:-1] & ~tail[1:])   # a tail step, then two sub-batches
    assert len(ends), "the arrivals must refill the emptied sub-batch"
    for last, resumed in zip(d[ends], d[ends + 1], strict=True):
        b = 1 if st["batch0"][last] == 0 else 0   # the sub-batch left alone, and pre-drafted
        assert (last, f"pre-draft B{b}") in work
        assert (resumed, f"verify B{b}") in work and (resumed, f"draft B{1 - b}") in work
        # drafted again only where a pre-draft was thrown away (not only a finished request's)
        redrafted = (resumed, f"re-draft B{b}") in work
        assert redrafted == (not st["parallelised"][resumed])
        assert not redrafted or st["pre_drafts_wasted"][last]
        after = resumed + 1
        assert (after, f"verify B{1 - b}") in work and st["parallelised"][after]
    assert r.summary["pre_drafts_wasted"] == st["pre_drafts_wasted"].sum() > 0


def test_same_scenario_same_seed_same_run_bit_for_bit():
    """Arrivals, aborts and pre-drafts: the pre-drafts' trials come from the run's one Generator."""
    s = small(method="psd", requests=30, m=4, k=3, rate=4.0, abort_fraction=0.2, tail="pre-draft", seed=7)
    a, b = simulate(s), simulate(s)
    assert a.summary == b.summary
    for table in ("steps", "requests"):
        x, y = getattr(a, table), getattr(b, table)
        assert x.keys() == y.keys()
        assert all(np.array_equal(x[c], y[c], equal_nan=x[c].dtype.kind == "f") for c in x), table


@pytest.mark.parametrize("changes", [dict(method="sd"), dict(method="pearl"), dict(sub_batches=3),
                                     dict(tail="sometimes")])
def test_pre_drafting_is_refused_where_there_is_no_such_tail(changes):
    with pytest.raises(ScenarioError) as err:
        validate(Scenario(**{"tail": "pre-draft", **changes}))
    assert err.value.field == "tail"


def test_requests_finishing_in_the_pre_drafted_tail_are_not_lost_drafts():
    """A tail step pre-drafts the sub-batch it verifies, so a request can finish in the very
    pass its sub-batch was drafted beside: it leaves finished, not preempted or aborted, and
    MineDraft's lost-drafts failure (sub_batching: `lost_drafted`) must not be reported for it.
    Offline, with room for every request, nothing is preempted or aborted at all."""
    stops = "MineDraft's code stops this run"
    for tail in ("pre-draft", "pre-draft-pearl"):
        r = simulate(small(method="psd", requests=6, m=2, k=2, output_len=24, tail=tail, seed=5))
        assert r.summary["preemptions"] == 0 and r.summary["aborted"] == 0
        tail_steps = (r.steps["batch0"] == 0) | (r.steps["batch1"] == 0)
        assert (tail_steps & (r.steps["kind"] == "decode")).sum() >= 2, "the case needs a tail"
        assert not [w for w in r.summary["warnings"] if stops in w], tail
