"""Memory feasibility: weights per GPU, the shared KV pool, and infeasible layouts as results."""

from __future__ import annotations

import pytest

from psdsim.cli import main
from psdsim.sim.catalog import builtin_catalog
from psdsim.sim.memory import plan_memory
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario, load_scenario

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
    draft = CAT.models["qwen3-1.7b"]
    assert gpu0.uncounted_bytes == pytest.approx(draft.weight_bytes)   # held, outside vLLM V0's profile
    assert gpu0.weight_bytes == gpu1.weight_bytes
    assert gpu0.kv_bytes_per_token - gpu1.kv_bytes_per_token == draft.kv_bytes_per_token
    assert len(plan.budgets) == 4


def test_vllm_v0_sizes_colocated_kv_without_the_drafts_weights():
    """vllm/spec_decode/spec_decode_worker.py, SpecDecodeWorker.determine_num_available_blocks
    asks the scorer's Worker alone (vllm/worker/worker.py, Worker.determine_num_available_blocks:
    total x gpu_memory_utilization - `memory_profiling`'s non_kv_cache_memory, vllm/utils, which
    is the scorer's `model_memory_usage` + the rise of the allocator's peak during its profile run
    + non-torch memory: the draft's weights, loaded before the profile, are none of them), then
    splits the blocks by block size (split_num_cache_blocks_evenly). GPU 0's pool is sized as if
    the draft weighed nothing; vLLM V1 counts it, as psdsim did for both before."""
    s = Scenario(target="llama-3.3-70b-awq", draft="llama-3.1-8b", method="sd", m=64)
    target, draft = CAT.models[s.target], CAT.models[s.draft]
    usable = CAT.gpus[s.gpu].memory_gb * 1e9 * s.gpu_memory_utilization
    free = usable - target.weight_bytes / 4 - s.activation_reserve_gb * 1e9
    per_token = target.kv_bytes_per_token_per_gpu(4) + draft.kv_bytes_per_token
    v0 = plan_memory(s, CAT)
    assert v0.fits and v0.kv_blocks == int(free // per_token) // s.block_size
    v1 = plan_memory(s.replace(scheduler="vllm-v1"), CAT)
    assert v1.kv_blocks == int((free - draft.weight_bytes) // per_token) // s.block_size
    assert v0.kv_blocks > 4 * v1.kv_blocks     # 16 GB of Llama-3.1-8B weights out of ~20 GB
    assert plan_memory(s.replace(kv_sizing="exact"), CAT).kv_blocks == v1.kv_blocks   # the what-if
    held = v0.budgets[0].held_bytes(v0.kv_tokens)
    assert held > usable and held <= 48e9      # beyond gpu_memory_utilization, within the L40S
    r = simulate(s.replace(requests=300))
    assert r.summary["preemptions"] == 0 and r.steps["running"].max() == s.m   # no longer KV-bound
    assert any("without the co-located draft's 16.1 GB" in w for w in r.summary["warnings"])


def test_sd_with_an_8b_draft_on_l40s_fits_by_less_than_a_gb_under_vllm_v0():
    """The paper's experiment_6 runs PSD only: co-located SD with Qwen3-8B OOMs (blog). Under
    vLLM V0's accounting (previous test) the L40S holds its weights, reserve and KV with 0.42 GB
    to spare, less than what the engine's profile leaves out (the CUDA context, the draft's
    activations), so the run warns that it may run out of memory; at a utilisation where the KV
    it sizes no longer fits the GPU's whole memory it does not fit, naming the field. vLLM V1,
    which counts the draft, refuses it for its weights."""
    s = Scenario(method="sd", draft="qwen3-8b")
    plan = plan_memory(s, CAT)
    assert plan.fits
    left = plan.budgets[0].memory_bytes - plan.budgets[0].held_bytes(plan.kv_tokens)
    assert 0.3e9 < left < s.activation_reserve_gb * 1e9
    assert any("may run out of memory" in w and "verifier GPU 0" in w for w in plan.warnings)
    over = simulate(s.replace(gpu_memory_utilization=0.70))
    assert not over.fits and "more than its 48.0 GB" in over.summary["infeasible_reason"]
    assert plan_memory(s.replace(gpu_memory_utilization=0.70), CAT).field == "gpu_memory_utilization"
    v1 = simulate(s.replace(scheduler="vllm-v1"))
    assert not v1.fits and "short by" in v1.summary["infeasible_reason"]
    assert simulate(s.replace(method="psd", requests=20)).fits
    assert not plan_memory(s.replace(method="psd"), CAT).warnings   # the drafter's own GPU counts it


def test_minedraft_counts_the_verifier_groups_blocks_at_one_more_tp_rank():
    """minedraft/plugin/config.py, VllmConfigPatch.__post_init__ restores tensor_parallel_size to
    TP + 1 (5: the drafter is rank 0) after verifying the model at TP;
    spec_decode/spec_decode_worker.py, ParallelSpecDecodeWorker.initialize_cache lowers it to TP
    around the allocation, determine_num_available_blocks does not: the scorer ranks' Worker
    counts blocks with CacheEngine.get_cache_block_size at ModelConfig.get_num_kv_heads =
    max(1, 8 // 5) = 1 KV head of Qwen3-32B's 8, while each holds 2 (vllm/config.py,
    vllm/worker/cache_engine.py). The executor's minimum is then the drafter's, and each verifier
    GPU allocates that many blocks of 2 heads past gpu_memory_utilization; plain vLLM (AR, SD)
    and vLLM V1 count what they hold."""
    s = Scenario()                                   # setting2: Qwen3-32B + Qwen3-1.7B
    target = CAT.models[s.target]
    psd, ar = plan_memory(s, CAT), plan_memory(s.replace(method="ar"), CAT)
    v0 = psd.budgets[0]
    assert v0.counted_kv_bytes * 2 == v0.kv_bytes_per_token == target.kv_bytes_per_token_per_gpu(4)
    assert psd.pools()["verifier"] in (2 * ar.kv_blocks, 2 * ar.kv_blocks + 1)   # floors of one division
    assert psd.kv_blocks == psd.pools()["drafter"] > ar.kv_blocks    # the drafter binds now, 12.7% more
    held = v0.held_bytes(psd.kv_tokens)
    assert v0.usable_bytes < held < v0.memory_bytes and not psd.warnings
    assert plan_memory(s.replace(scheduler="vllm-v1"), CAT).pools()["verifier"] == ar.kv_blocks
    assert plan_memory(s.replace(kv_sizing="exact"), CAT).pools()["verifier"] == ar.kv_blocks
    assert plan_memory(s.replace(sub_batches=3), CAT).pools()["verifier"] == ar.kv_blocks   # the ring
    pearl = plan_memory(s.replace(method="pearl"), CAT)
    assert pearl.pools()["verifier"] == psd.pools()["verifier"]
    c10 = plan_memory(load_scenario(preset="c10"), CAT).budgets[0]   # 4 KV heads: 1 at 4 ranks and at 5
    assert c10.counted_kv_bytes == c10.kv_bytes_per_token


def test_llama_70b_bf16_does_not_fit_on_four_l40s():
    s = Scenario(target="llama-3.3-70b", draft="llama-3.1-8b")
    plan = plan_memory(s, CAT)
    assert not plan.fits and plan.field == "target"


def test_kv_pool_smaller_than_one_sequence_is_reported():
    s = Scenario(method="ar", gpu_memory_utilization=0.374)
    plan = plan_memory(s, CAT)
    assert not plan.fits and "KV cache" in plan.reason


def test_kv_pool_limits_concurrency_without_oversubscription():
    # A pool for only a few full-length sequences: fewer than 2m requests may run at once (24k
    # slots as MineDraft counts them, half a head's worth each: below).
    s = Scenario(requests=64, output_len=1000, prompt_len=1000, gpu_memory_utilization=0.389)
    r = simulate(s)
    assert r.fits
    assert r.kv.peak_blocks <= r.kv.total_blocks
    assert r.steps["running"].max() < 2 * s.m


def test_qwen3_235b_fp8_does_not_fit_on_l40s_but_does_on_h200():
    s = Scenario(target="qwen3-235b-a22b-fp8", draft="qwen3-14b", m=64)
    plan = plan_memory(s, CAT)
    assert not plan.fits and "verifier GPU 0 (l40s)" in plan.reason and "short by" in plan.reason
    assert plan_memory(s.replace(gpu="h200"), CAT).fits


def test_a_bad_kv_sizing_is_one_line_naming_the_field(capsys):
    assert main(["run", "--no-write", "--set", "kv_sizing=precise"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "kv_sizing" in err and "vllm, exact" in err
