"""What PSD should and should not buy, checked on idealised constant-cost runs."""

from __future__ import annotations

import pytest

from psdsim.sim.costs import ConstantCost
from psdsim.sim.run import simulate
from tests.helpers.scenarios import small


def _throughputs(draft_s: float, verify_s: float, **scenario):
    s = small(**scenario)
    cost = ConstantCost(draft_s, verify_s)
    psd = simulate(s.replace(method="psd"), cost=cost).summary
    sd = simulate(s.replace(method="sd"), cost=cost).summary
    return psd, sd


def test_drafting_equal_to_verification_approaches_twice_sd():
    psd, sd = _throughputs(1.0, 1.0, requests=800, m=4, output_len=64)
    ratio = psd["throughput_tok_s"] / sd["throughput_tok_s"]
    assert 1.9 < ratio <= 2.0


def test_drafting_much_longer_than_verification_gains_nothing():
    psd, sd = _throughputs(10.0, 1.0, requests=400, m=4, output_len=64)
    ratio = psd["throughput_tok_s"] / sd["throughput_tok_s"]
    # A PSD step is max(10, 1) = 10 against SD's 10 + 1 = 11: at most 10% better, never worse.
    assert 1.0 <= ratio <= 1.1 + 1e-9


@pytest.mark.parametrize("requests, low, high", [(8, 0.0, 0.97), (800, 0.98, 1.0)])
def test_tail_effect_needs_a_deep_request_pool(requests, low, high):
    """With a pool of only 2m requests the sub-batches drain unevenly and PSD falls back to
    sequential SD for a visible share of steps; a deep pool keeps it parallel."""
    s = small(method="psd", requests=requests, m=4, output_len=64)
    rate = simulate(s, cost=ConstantCost(1.0, 1.0)).summary["parallelization_rate"]
    assert low <= rate <= high


def test_pool_of_2m_is_visibly_less_parallel_than_a_deep_pool():
    s = small(method="psd", m=4, output_len=64)
    cost = ConstantCost(1.0, 1.0)
    shallow = simulate(s.replace(requests=8), cost=cost).summary["parallelization_rate"]
    deep = simulate(s.replace(requests=800), cost=cost).summary["parallelization_rate"]
    assert deep - shallow > 0.05


def test_ar_emits_one_token_per_request_per_step():
    s = small(method="ar", requests=8, m=8, output_len=20)
    r = simulate(s, cost=ConstantCost(0.0, 1.0))
    assert r.summary["decode_steps"] == 19  # the first token comes from the prefill step
    assert r.summary["vsr"] is None
