"""The decoupled drafter service's building blocks: likely outcomes, a shared drafter queue, a
shared link, and V = D = b = 1 against its closed form."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from psdsim.sim.clock import Clock
from psdsim.sim.devices import TO_VERIFIER, Link
from psdsim.sim.drafter_service import (
    DrafterService,
    accepted_length_pmf,
    booked_rounds,
    expected_step_s,
    hit_probability,
    likely_lengths,
)


def test_pmf_sums_to_one_and_matches_hand_values():
    pmf = accepted_length_pmf(0.5, 3)
    assert pmf.tolist() == [0.5, 0.25, 0.125, 0.125]
    assert pmf.sum() == pytest.approx(1.0)


def test_likely_set_low_and_high_acceptance():
    # a = 0.3: P(0) = 0.7 dominates; a = 0.9, k = 4: P(4) = 0.6561 dominates, then P(0) = 0.1
    assert likely_lengths(0.3, 4, 1) == (0,)
    assert likely_lengths(0.9, 4, 1) == (4,)
    assert likely_lengths(0.9, 4, 2) == (0, 4)
    assert hit_probability(0.9, 4, 2) == pytest.approx(0.6561 + 0.1)
    assert hit_probability(0.5, 3, 4) == pytest.approx(1.0)


def test_shared_drafter_second_verifier_waits_first_ones_drafting():
    service = DrafterService(1)
    first = service.book(1.0, 0.004)
    second = service.book(1.0, 0.003)
    assert (first.start_s, first.end_s, first.wait_s) == (1.0, 1.004, 0.0)
    assert second.start_s == first.end_s
    assert second.wait_s == pytest.approx(0.004)
    assert service.busy_s == pytest.approx(0.007)


def test_two_servers_serve_two_verifiers_without_waiting():
    service = DrafterService(2)
    a, b, c = service.book(0.0, 2.0), service.book(0.0, 1.0), service.book(0.5, 1.0)
    assert (a.server, b.server, a.wait_s, b.wait_s) == (0, 1, 0.0, 0.0)
    assert (c.server, c.start_s, c.wait_s) == (1, 1.0, 0.5)   # the server free first


def test_hit_and_miss_hand_computed():
    # a = 0.9, k = 1, b = 1: likely set {1}. P(hit) = 0.9. With one verifier, verify 1 s,
    # branch drafting 0.5 s, miss drafting 0.25 s: a hit step takes 1 s, a miss 1.25 s.
    rng = np.random.default_rng(3)
    end, hits, misses = booked_rounds(0.9, 1, 1, 1.0, 0.5, lambda n: 0.25, verifiers=1, servers=1,
                                      rounds=200, rng=rng)
    assert hits + misses == 200 and hits > 0 and misses > 0
    assert end == pytest.approx(hits * 1.0 + misses * 1.25)


def test_link_contention_between_two_verifiers():
    link = Link(Clock(), lambda n: 1e-6 + n / 1e9, lambda n: 1e-6 + n / 1e9)
    first, hold = link.reserve(TO_VERIFIER, (1000,), now=0.0)
    second, _ = link.reserve(TO_VERIFIER, (1000,), now=0.0)
    assert first == pytest.approx(2e-6)
    assert second == pytest.approx(first + hold)   # the second verifier's inputs wait for the first's


def test_one_verifier_one_server_one_branch_matches_theory():
    a, k, verify_s, branch_s, miss_s, rounds = 0.7, 4, 0.010, 0.004, 0.004, 20000
    end, hits, misses = booked_rounds(a, k, 1, verify_s, branch_s, lambda n: miss_s, 1, 1, rounds,
                                      np.random.default_rng(11))
    theory = expected_step_s(a, k, 1, verify_s, branch_s, miss_s)
    assert hits + misses == rounds
    assert hits / rounds == pytest.approx(hit_probability(a, k, 1), abs=0.015)   # sampling error ~0.003
    assert end / rounds == pytest.approx(theory, rel=0.01)


def test_drafter_shared_by_more_verifiers_slows_each():
    args = (0.7, 4, 1, 0.010, 0.008, lambda n: 0.004)
    one, _, _ = booked_rounds(*args, verifiers=1, servers=1, rounds=500, rng=np.random.default_rng(5))
    four, _, _ = booked_rounds(*args, verifiers=4, servers=1, rounds=500, rng=np.random.default_rng(5))
    assert four > one   # 4 x 8 ms of drafting per round outlasts one 10 ms verification


def test_only_the_missed_requests_are_redrafted():
    # a batch of 8 at a = 0.5, k = 2, b = 1: likely {0}, each request misses with P = 0.5; the
    # miss drafting costs 1 ms per missed request, verification 10 ms, branch drafting 2 ms
    end, hits, misses = booked_rounds(0.5, 2, 1, 0.010, 0.002, lambda n: 0.001 * n, 1, 1, 300,
                                      np.random.default_rng(2), batch=8)
    assert hits + misses == 8 * 300
    assert end == pytest.approx(300 * 0.010 + 0.001 * misses)   # a miss-free step adds nothing
    assert misses / (8 * 300) == pytest.approx(0.5, abs=0.05)


@settings(max_examples=60, deadline=None)
@given(servers=st.integers(1, 4),
       jobs=st.lists(st.tuples(st.floats(0, 5), st.floats(0, 2)), min_size=1, max_size=30))
def test_service_never_overlaps_a_server_nor_runs_before_submission(servers, jobs):
    service, by_server, at = DrafterService(servers), {}, 0.0
    for gap, seconds in jobs:
        at += gap   # submissions in time order, as the verifiers make them
        b = service.book(at, seconds)
        assert b.start_s >= at and b.wait_s >= 0 and b.end_s == b.start_s + seconds
        by_server.setdefault(b.server, []).append(b)
    for bookings in by_server.values():
        for before, after in itertools.pairwise(bookings):
            assert after.start_s >= before.end_s
    assert service.busy_s == pytest.approx(sum(s for _, s in jobs))


@settings(max_examples=40, deadline=None)
@given(a=st.floats(0, 1), k=st.integers(0, 8), b=st.integers(1, 10))
def test_likely_set_is_the_most_probable(a, k, b):
    pmf = accepted_length_pmf(a, k)
    assert pmf.sum() == pytest.approx(1.0)
    likely = likely_lengths(a, k, b)
    assert len(likely) == min(b, k + 1)
    rest = [pmf[j] for j in range(k + 1) if j not in likely]
    assert all(pmf[j] >= r for j in likely for r in rest)
    assert hit_probability(a, k, b) <= hit_probability(a, k, b + 1) + 1e-12
