"""Demonstrations of the scheduler effects the paper names, each an assertion that could fail."""

from __future__ import annotations

import numpy as np
import pytest

from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario

BASE = dict(requests=400, output_len=128, prompt_len=0, seed=1)


def loaded_imbalance(r) -> np.ndarray:
    """|B1 - B0| over the decode steps while requests still wait (the pool is kept full)."""
    st = r.steps
    d = (st["kind"] == "decode") & (st["waiting"] > 0)
    return np.abs(st["batch1"] - st["batch0"])[d]


def concurrency(r) -> float:
    st = r.steps
    d = (st["kind"] == "decode") & (st["waiting"] > 0)
    return float((st["batch0"] + st["batch1"])[d].mean())


def test_ample_kv_and_no_aborts_keep_the_split_even():
    r = simulate(Scenario(**BASE))
    imb = loaded_imbalance(r)
    assert len(imb) > 500 and (imb == 0).all()
    assert r.summary["preemptions"] == 0


def test_aborts_skew_the_split_and_the_skew_is_preserved():
    # the Batch Manager's mechanics under the roofline engine: the eager engine's CPU floor changes
    # the timing of the cancellations, and so which sub-batch they hit (docs/engine-costs.md)
    r = simulate(Scenario(**BASE, abort_fraction=0.2, engine="roofline"))
    imb = loaded_imbalance(r)
    assert r.summary["aborted"] > 20
    assert imb.mean() > 1.0
    later = imb[len(imb) // 2:]  # once skewed it is not restored: refills go where the holes are
    assert (later > 0).mean() > 0.8


def test_preemption_under_vllm_v0_skews_the_split():
    r = simulate(Scenario(**BASE, num_gpu_blocks_override=700))
    assert r.summary["preemptions"] > 10 and r.summary["recomputed_tokens"] > 0
    assert loaded_imbalance(r).mean() > 0.5


@pytest.mark.parametrize("skew", [dict(abort_fraction=0.2), dict(num_gpu_blocks_override=700)])
def test_assign_always_returns_the_split_toward_even(skew):
    plain = simulate(Scenario(**BASE, **skew))
    balanced = simulate(Scenario(**BASE, **skew, rebalance=True))
    assert loaded_imbalance(balanced).mean() < 0.4 * loaded_imbalance(plain).mean()
    # the price: requests verified before they were ever drafted
    assert balanced.summary["wasted_verifications"] > 0 == plain.summary["wasted_verifications"]


def test_chunked_prefill_skews_more_than_prefill_steps_on_a_bursty_workload():
    burst = dict(BASE, rate=50.0, max_num_batched_tokens=512)
    off = simulate(Scenario(**{**burst, "max_num_batched_tokens": 2048}))
    on = simulate(Scenario(**burst, enable_chunked_prefill=True))
    assert loaded_imbalance(on).mean() > loaded_imbalance(off).mean() == 0
    # MineDraft's code computes a prompt's chunks only when its sub-batch is verified, so it
    # graduates in phase (docs/minedraft-fidelity.md §3); computing every chunk in every pass
    # (the what-if) lets prompts graduate out of phase, into the sub-batch verified next
    assert on.summary["wasted_verifications"] == 0
    every = simulate(Scenario(**burst, enable_chunked_prefill=True, psd_prefill_chunks="every-pass"))
    assert every.summary["wasted_verifications"] > 0


def test_the_intended_deferral_fits_more_concurrent_requests_than_the_code():
    """kv_patch = intended (the saving MineDraft's has_deferred patch meant, a what-if): deferring
    the drafted sub-batch's KV growth by one step frees a little KV, about 1% more concurrent
    requests when the pool is tight, k is large and blocks are small. The code (has_deferred)
    holds what vLLM's default holds (docs/minedraft-fidelity.md §1)."""
    tight = dict(k=8, block_size=4, num_gpu_blocks_override=400, prompt_len=64, output_len=64,
                 requests=400, max_model_len=256, seed=0)
    intended = simulate(Scenario(**tight, kv_patch="intended"))
    code = simulate(Scenario(**tight, kv_patch="has_deferred"))
    assert concurrency(intended) > 1.005 * concurrency(code)


def test_the_intended_deferral_holds_fewer_blocks_per_running_request():
    def blocks_per_request(r) -> float:
        st = r.steps
        d = (st["kind"] == "decode") & (st["waiting"] > 0)
        return float((st["kv_blocks"][d] / st["running"][d]).mean())
    s = Scenario(requests=300, output_len=256, seed=2)
    assert blocks_per_request(simulate(s.replace(kv_patch="intended"))) < blocks_per_request(simulate(s))


def test_a_small_draft_gpu_limits_psd_before_the_target_does():
    s = Scenario(gpu="h100-sxm", drafter_gpu="l40s", draft="qwen3-8b", link="pcie5",
                 gpu_memory_utilization=0.42, requests=300, output_len=256)
    r = simulate(s)
    assert r.kv.binding == "drafter"
    assert r.summary["kv_peak_usage"]["drafter"] == pytest.approx(1.0, abs=0.02)
    assert r.summary["kv_peak_usage"]["verifier"] < 0.2
    assert concurrency(r) < 0.9 * 2 * s.m and r.summary["preemptions"] > 0
    roomy = simulate(s.replace(drafter_gpu="h100-sxm"))
    assert concurrency(roomy) == 2 * s.m


def test_swap_preemption_moves_blocks_instead_of_recomputing():
    s = Scenario(**BASE, num_gpu_blocks_override=700, preemption_mode="swap")
    r = simulate(s)
    assert r.summary["preemptions"] > 0 and r.summary["swap_s"] > 0
    assert r.summary["recomputed_tokens"] == 0
    no_room = simulate(s.replace(swap_space_gb=0.0))  # no CPU space: falls back to recompute
    assert no_room.summary["swap_s"] == 0 and no_room.summary["recomputed_tokens"] > 0


def test_vllm_v1_admits_nothing_in_a_step_that_preempted():
    s = Scenario(**BASE, scheduler="vllm-v1", num_gpu_blocks_override=700, max_num_batched_tokens=1024)
    r = simulate(s)
    st, req = r.steps, r.requests
    preempting = st["start_s"][st["preempted"] > 0]
    assert len(preempting) > 0
    assert not np.isin(req["admitted_s"], preempting).any()


def test_vllm_v1_counts_draft_tokens_against_the_budget():
    s = Scenario(method="sd", m=8, k=4, requests=60, output_len=64, prompt_len=32,
                 scheduler="vllm-v1", max_num_batched_tokens=24)
    st = simulate(s).steps
    d = st["kind"] == "decode"
    # decodes (one token each) and their drafts share 24 tokens with the step's prompt chunks
    assert (st["scored"][d] + st["prefill_tokens"][d] <= 24).all()
    assert (st["proposed"][d] < st["verified"][d] * 4).any()  # drafts were cut
