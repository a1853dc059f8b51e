"""The analytic roofline and the link model behave as their physics says."""

from __future__ import annotations

import pytest

from psdsim.sim.catalog import builtin_catalog
from psdsim.sim.costs import NO_PARTS, OPTIONAL, AnalyticCost, Chunks, ConstantCost, complete
from psdsim.sim.execution import step_cost
from psdsim.sim.messages import sampler_output
from psdsim.sim.scenario import Scenario

CAT = builtin_catalog()


def test_small_batch_decode_is_memory_bound():
    cost = AnalyticCost(Scenario(), CAT)
    # Going from 1 to 16 scored tokens barely changes a weight-read-bound step.
    one, sixteen = cost.verify(1, 1, 500), cost.verify(16, 16, 500 * 16)
    assert sixteen / one < 1.3


def test_costs_grow_with_work():
    cost = AnalyticCost(Scenario(), CAT)
    assert cost.verify(16, 64, 16_000) > cost.verify(16, 16, 16_000)
    assert cost.verify(16, 64, 32_000) > cost.verify(16, 64, 16_000)
    assert cost.draft(16, 4, 10_000) > cost.draft(16, 3, 10_000)
    one, two = Chunks(1000, 1000**2 / 2, 0, 1), Chunks(2000, 2 * 1000**2 / 2, 0, 2)
    assert cost.verify(0, 0, 0, two) > cost.verify(0, 0, 0, one)
    assert cost.draft_chunks(two) > cost.draft_chunks(one) > cost.draft_chunks(Chunks()) == 0


def test_chunks_share_the_weight_read_with_verification():
    cost = AnalyticCost(Scenario(), CAT)
    chunk = Chunks(256, 256**2 / 2, 0, 1)
    together = cost.verify(16, 64, 16_000, chunk)
    apart = cost.verify(16, 64, 16_000) + cost.verify(0, 0, 0, chunk)
    assert together < apart


def test_draft_passes_equal_the_sum_of_single_passes():
    cost = AnalyticCost(Scenario(), CAT)
    total = sum(cost.drafter.seconds(16, 16, 10_000 + 16 * j, 10_000 + 16 * j) for j in range(4))
    assert cost.draft(16, 4, 10_000) == pytest.approx(total, rel=1e-12)


def test_tensor_parallel_all_reduces_cost_more_over_pcie_than_nvlink():
    pcie = AnalyticCost(Scenario(link="pcie4"), CAT)
    nvlink = AnalyticCost(Scenario(link="nvlink4"), CAT)
    assert pcie.verify(16, 64, 10_000) > nvlink.verify(16, 64, 10_000)
    # The draft runs at TP=1: no all-reduce, so the fabric does not change it.
    assert pcie.draft(16, 3, 10_000) == pytest.approx(nvlink.draft(16, 3, 10_000))


def test_sampler_output_is_dominated_by_full_vocab_rows():
    vocab = CAT.models["qwen3-32b"].vocab
    nbytes = sum(sampler_output(64, vocab))
    assert nbytes == pytest.approx(64 * 2 * 4 * vocab, rel=0.001)


def test_link_time_is_latency_plus_bytes_over_bandwidth():
    link = CAT.links["pcie4"]
    assert link.p2p_seconds(0) == pytest.approx(10e-6)
    assert link.p2p_seconds(22e9) == pytest.approx(1.0 + 10e-6)
    assert link.allreduce_seconds(1e6, 1) == 0.0
    assert link.allreduce_seconds(1e6, 4) == pytest.approx(30e-6 + 1.5e6 / 20e9)


def test_l40s_verify_step_near_reference_estimate():
    """Reference §4.4 estimates a Qwen3-32B TP4 step on 4xL40S at B=16 as 31.2 ms; the
    catalog defaults (eager launch overhead, PCIe all-reduce latency) give a similar figure."""
    cost = AnalyticCost(Scenario(), CAT)
    ms = cost.verify(16, 16, 16 * 1024) * 1e3
    assert 25 < ms < 40


class _Required:
    """A cost model from outside the package: the required terms only, and its own contention."""

    overhead = 0.5
    contention = (1.3, 1.1)

    def verify(self, batch: int, tokens: int, ctx: int, chunks: Chunks | None = None) -> float:
        return 0.006


def test_every_cost_model_here_declares_the_optional_capabilities():
    s = Scenario()
    engine = step_cost(s.replace(engine="vllm-0.9.2-v0-eager"), CAT)
    for cost in (AnalyticCost(s, CAT), ConstantCost(1.0, 1.0), engine):
        assert complete(cost) is cost
        for name in OPTIONAL:
            assert hasattr(cost, name), (type(cost).__name__, name)


def test_a_cost_model_without_them_gets_the_defaults_and_keeps_its_own():
    cost = complete(_Required())
    assert cost.contention == (1.3, 1.1)                        # its own
    assert cost.framework(8, 4) == 0.5 and cost.driver_prep(8, 32) == 0.0   # the defaults
    assert cost.verify_parts(8, 32) is NO_PARTS and cost.after_idle is None and not cost.extra_draft_rows
    assert cost.verify(4, 8, 100) == 0.006                       # the rest is its own, read through
