"""The decoupled drafter service as a method (`method = "decoupled"`), by hand-built cases: a shared
drafter queueing two verifiers, hits and misses step by step, V = D = b = 1 against the closed
form, and the GPUs counted."""

from __future__ import annotations

import numpy as np
import pytest

from psdsim.sim.costs import Chunks, ConstantCost
from psdsim.sim.drafter_service import expected_step_s, hit_probability, likely_lengths
from psdsim.sim.errors import ScenarioError
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario

VERIFY_S, DRAFT_S, PREFILL_DRAFT_S = 0.010, 0.004, 0.003


class PrefillDrafting(ConstantCost):
    """ConstantCost whose draft model's prompt pass takes PREFILL_DRAFT_S (ConstantCost's is free)."""

    def draft_chunks(self, chunks: Chunks) -> float:
        return PREFILL_DRAFT_S if chunks.tokens else 0.0


def _scenario(**fields) -> Scenario:
    base = dict(method="decoupled", k=3, m=1, requests=1, output_len=40, prompt_len=32, acceptance=0.6,
                acceptance_spread=1e6, service_verifiers=1, service_drafters=1, service_branches=1)
    return Scenario(**{**base, **fields})


def _steps(r, replica: int | None = None) -> dict[str, np.ndarray]:
    keep = np.ones(len(r.steps["start_s"]), dtype=bool)
    if replica is not None:
        keep = r.steps["replica"] == replica
    return {name: values[keep] for name, values in r.steps.items()}


def test_a_shared_drafter_queues_the_second_verifier_for_exactly_the_firsts_drafting():
    """Two replicas, one request each, arrive at 0 and prefill in a step the target does in no
    time: both submit the draft model's prompt pass at 0 to one drafter GPU, and the second waits
    exactly the first's drafting before its own; with two drafter GPUs neither waits."""
    for drafters, waited in ((1, PREFILL_DRAFT_S), (2, 0.0)):
        r = simulate(_scenario(requests=2, service_verifiers=2, service_drafters=drafters),
                     cost=PrefillDrafting(DRAFT_S, VERIFY_S))
        first = [_steps(r, v) for v in (0, 1)]
        assert first[0]["kind"][0] == first[1]["kind"][0] == "prefill"
        assert first[0]["drafter_queue_s"][0] == 0.0
        assert first[0]["end_s"][0] == PREFILL_DRAFT_S
        assert first[1]["drafter_queue_s"][0] == waited
        assert first[1]["end_s"][0] == waited + PREFILL_DRAFT_S


def test_each_step_hits_or_misses_as_its_accepted_length_says():
    """One request on one replica (m = 1): a decode step's accepted length is the step's accepted
    column. Its next drafts were prepared for the likely length alone (b = 1): the step takes
    max(verify, draft) on a hit, and a re-drafting more on a miss (but the last, which ends the
    request); its first decode drafts first (no drafts prepared)."""
    s = _scenario(acceptance=0.5)
    r = simulate(s, cost=ConstantCost(DRAFT_S, VERIFY_S))
    st = _steps(r)
    likely = likely_lengths(0.5, s.k, 1)
    assert likely == (0,)
    decode = np.flatnonzero(st["kind"] == "decode")
    seconds = st["end_s"] - st["start_s"]
    beside = max(VERIFY_S, DRAFT_S)
    hits = misses = 0
    for i in decode[:-1]:
        missed = int(st["accepted"][i] not in likely)
        cold = int(i == decode[0])   # drafted first, on the critical path
        assert st["drafts_missed"][i] == missed
        assert st["drafts_wasted"][i] == missed   # b = 1: the one branch, when missed
        assert st["parallelised"][i] == (not cold)
        assert seconds[i] == pytest.approx(beside + DRAFT_S * (cold + missed))
        hits, misses = hits + (not missed), misses + missed
    assert hits and misses   # the case exercises both
    assert st["drafts_missed"][decode[-1]] == 0   # the last step ends the request: nothing to redo


def test_one_verifier_one_drafter_one_branch_matches_the_closed_form():
    """V = D = b = 1, a long request at a fixed rate: the mean decode step (the cold first and the
    last aside) is max(verify, draft) + (1 - P(hit)) draft, expected_step_s's closed form."""
    a, k = 0.7, 3
    s = _scenario(acceptance=a, k=k, output_len=1800)
    r = simulate(s, cost=ConstantCost(DRAFT_S, VERIFY_S))
    st = _steps(r)
    decode = np.flatnonzero(st["kind"] == "decode")[1:-1]
    seconds = (st["end_s"] - st["start_s"])[decode]
    expected = expected_step_s(a, k, 1, VERIFY_S, DRAFT_S, DRAFT_S)
    h = hit_probability(a, k, 1)
    # the mean of n steps, each beside or beside + draft: its standard error is draft * sqrt(h(1-h)/n)
    se = DRAFT_S * np.sqrt(h * (1 - h) / len(seconds))
    assert abs(seconds.mean() - expected) < 4 * se
    assert len(seconds) > 400


@pytest.mark.parametrize(("verifiers", "drafters", "tp"), [(1, 1, 4), (2, 1, 4), (3, 2, 4), (3, 2, 2)])
def test_gpus_are_the_verifier_groups_and_the_drafters(verifiers: int, drafters: int, tp: int):
    """V x TP + D, in a run that fits and in one that does not (TP = 2 cannot hold the target)."""
    s = _scenario(requests=4, service_verifiers=verifiers, service_drafters=drafters, tensor_parallel_size=tp)
    summary = simulate(s, cost=ConstantCost(DRAFT_S, VERIFY_S)).summary
    assert summary["gpus"] == verifiers * tp + drafters
    assert summary["fits"] == (tp == 4)
    if summary["fits"]:
        per_gpu = summary["throughput_tok_s"] / summary["gpus"]
        assert summary["throughput_tok_s_per_gpu"] == pytest.approx(per_gpu)


def test_requests_are_routed_round_robin_and_merged_in_order():
    r = simulate(_scenario(requests=7, service_verifiers=3), cost=ConstantCost(DRAFT_S, VERIFY_S))
    assert r.requests["request"].tolist() == list(range(7))
    assert sorted(np.unique(r.steps["replica"]).tolist()) == [0, 1, 2]
    assert (np.diff(r.steps["start_s"]) >= 0).all()


@pytest.mark.parametrize(("field", "value"), [("service_verifiers", 0), ("service_drafters", 65),
                                               ("service_branches", 5)])
def test_service_fields_are_checked(field: str, value: int):
    with pytest.raises(ScenarioError, match=field):
        simulate(_scenario(**{field: value}))


def test_same_scenario_and_seed_give_identical_tables():
    """V replicas interleave in SimPy and share one Generator: the order is deterministic."""
    s = Scenario(method="decoupled", requests=24, output_len=24, m=4, prompt_len=48, rate=20.0,
                 abort_fraction=0.3, service_verifiers=3, service_drafters=2, seed=7)
    a, b = simulate(s), simulate(s)
    for table in ("steps", "requests"):
        x, y = getattr(a, table), getattr(b, table)
        assert x.keys() == y.keys()
        for name in x:
            assert np.array_equal(x[name], y[name]), (table, name)
    assert a.summary == b.summary


def test_the_run_says_what_it_is_and_other_methods_say_the_service_fields_are_ignored():
    from psdsim.sim.scenario_caveats import warnings

    assert any("decoupled drafter service (V = 2" in w and "upper bound" in w
               for w in warnings(Scenario(method="decoupled")))
    assert "ignored: service_branches applies to method decoupled only" in warnings(
        Scenario(method="sd", service_branches=1))
    assert not any("decoupled" in w for w in warnings(Scenario(method="psd")))
