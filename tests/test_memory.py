"""Memory feasibility: weights per GPU, the shared KV pool, and infeasible layouts as results."""

from __future__ import annotations

import pytest

from psdsim.sim.catalog import builtin_catalog
from psdsim.sim.memory import plan_memory
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario

CAT = builtin_catalog()


def test_default_layout_fits_with_room_for_kv():
    plan = plan_memory(Scenario(), CAT)
    assert plan.fits and plan.reason is None
    assert [b.role for b in plan.budgets] == [f"verifier GPU {i}" for i in range(4)] + ["drafter GPU"]
    # Qwen3-32B bf16 at TP=4 is ~16.4 GB per GPU (docs/reference/hardware_models_workloads.md §2.2).
    assert plan.budgets[0].weight_bytes / 1e9 == pytest.approx(65.52 / 4, rel=0.01)
    assert plan.kv_tokens > 100_000


def test_sd_colocates_the_draft_on_gpu_zero():
    plan = plan_memory(Scenario(method="sd"), CAT)
    gpu0, gpu1 = plan.budgets[0], plan.budgets[1]
    assert gpu0.weight_bytes - gpu1.weight_bytes == pytest.approx(CAT.models["qwen3-1.7b"].weight_bytes)
    assert len(plan.budgets) == 4


def test_sd_with_an_8b_draft_does_not_fit_on_l40s():
    """The paper's experiment_6 runs PSD only: co-located SD with Qwen3-8B OOMs (blog)."""
    s = Scenario(method="sd", draft="qwen3-8b")
    r = simulate(s)
    assert not r.fits
    assert "verifier GPU 0" in r.summary["infeasible_reason"]
    assert "short by" in r.summary["infeasible_reason"]
    assert simulate(s.replace(method="psd", requests=20)).fits


def test_llama_70b_bf16_does_not_fit_on_four_l40s():
    s = Scenario(target="llama-3.3-70b", draft="llama-3.1-8b")
    plan = plan_memory(s, CAT)
    assert not plan.fits and plan.field == "target"


def test_kv_pool_smaller_than_one_sequence_is_reported():
    s = Scenario(gpu_memory_utilization=0.374)
    plan = plan_memory(s, CAT)
    assert not plan.fits and "KV cache" in plan.reason


def test_kv_pool_limits_concurrency_without_oversubscription():
    # A pool for only a few full-length sequences: fewer than 2m requests may run at once.
    s = Scenario(requests=64, output_len=1000, prompt_len=1000, gpu_memory_utilization=0.3965)
    r = simulate(s)
    assert r.fits
    assert r.kv.peak_blocks <= r.kv.total_blocks
    assert r.steps["running"].max() < 2 * s.m


def test_qwen3_235b_fp8_does_not_fit_on_l40s_but_does_on_h200():
    s = Scenario(target="qwen3-235b-a22b-fp8", draft="qwen3-14b", m=64)
    plan = plan_memory(s, CAT)
    assert not plan.fits and "verifier GPU 0 (l40s)" in plan.reason and "short by" in plan.reason
    assert plan_memory(s.replace(gpu="h200"), CAT).fits
