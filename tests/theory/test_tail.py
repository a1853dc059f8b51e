"""The finite-pool tail: its formula, and the simulator's parallelization rate against it."""

from __future__ import annotations

import numpy as np
import pytest

from psdsim.sim.costs import ConstantCost
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario
from psdsim.theory.tail import tail_exact, tail_sampled, tokens_pmf, verifications_pmf

M, K, OUT, ACC, SPREAD = 4, 3, 64, 0.61, 20.0


def test_tokens_pmf():
    p = tokens_pmf(0.6, 3)
    assert p.sum() == pytest.approx(1.0) and p[0] == 0
    assert p @ np.arange(len(p)) == pytest.approx(1 + 0.6 + 0.36 + 0.216)


def test_verifications_pmf_limits():
    pmf = verifications_pmf(10, 4, 1e-12)  # nothing accepted: one token per verification
    assert pmf[9] == pytest.approx(1.0)
    pmf = verifications_pmf(OUT, K, ACC, SPREAD)
    assert pmf.sum() == pytest.approx(1.0) and (pmf >= 0).all()
    mean_l = pmf @ np.arange(len(pmf))
    assert (OUT - 1) / (K + 1) < mean_l < OUT - 1


def test_exact_and_sampled_agree_for_small_pools():
    pmf = verifications_pmf(OUT, K, ACC, SPREAD)
    for n in (1, 3, 8):
        exact = tail_exact(n, M, pmf)
        sampled = tail_sampled(n, M, pmf, np.random.default_rng(1), samples=20000)
        assert exact.exact and not sampled.exact
        assert sampled.parallelization_rate == pytest.approx(exact.parallelization_rate, abs=0.004)
        assert sampled.decode_steps == pytest.approx(exact.decode_steps, rel=0.01)
    assert tail_exact(1, M, pmf).parallelization_rate == 0.0


@pytest.mark.parametrize("pool, seeds", [(2 * M, 200), (4 * M, 100), (30 * M, 30)])
def test_formula_matches_simulated_parallelization_within_one_point(pool, seeds):
    """Offline pools of 2m, 4m and 30m requests: the simulator's share of parallelised decode
    steps (pooled over seeds) against theory.tail, within 1 percentage point."""
    pmf = verifications_pmf(OUT, K, ACC, SPREAD)
    predicted = (tail_exact(pool, M, pmf) if pool <= 2 * M
                 else tail_sampled(pool, M, pmf, np.random.default_rng(0)))
    steps = non_parallel = 0
    for seed in range(seeds):
        s = Scenario(method="psd", m=M, k=K, output_len=OUT, prompt_len=32, requests=pool,
                     acceptance=ACC, acceptance_spread=SPREAD, seed=seed)
        st = simulate(s, cost=ConstantCost(1.0, 1.0)).steps
        decode = st["kind"] == "decode"
        steps += decode.sum()
        non_parallel += (~st["parallelised"][decode]).sum()
    simulated = 1 - non_parallel / steps
    assert simulated == pytest.approx(predicted.parallelization_rate, abs=0.01)
