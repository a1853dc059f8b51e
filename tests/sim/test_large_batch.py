"""The large-batch regime of the m = 64 presets, mechanism by mechanism, each pinned to the code
it follows (vLLM 0.9.2's V0 engine, MineDraft's plugin; docs/methods.md, "The large-batch
regime"). Where psdsim departed from the code the change has its own test beside the code's
rule (tests/sim/test_memory.py: co-located SD's KV and the verifier's blocks counted at TP + 1;
tests/sim/test_minedraft_fidelity.py §10: a request lost from the sub-batch holding drafts); these
pin what already matched."""

from __future__ import annotations

import numpy as np

from psdsim.sim.catalog import builtin_catalog
from psdsim.sim.memory import plan_memory
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario, load_scenario

CAT = builtin_catalog()


def test_n_samples_fan_out_into_sequences_that_max_num_seqs_counts_and_psd_doubles():
    """vllm/sequence.py, ParallelSampleSequenceGroup.add_request: a prompt with n = 2 becomes two
    SequenceGroups of one sequence each (SamplingParams n = 1, ids `..._parallel_sample_i`);
    vllm/core/scheduler.py, Scheduler._schedule_prefills counts each group's
    get_max_num_running_seqs() = 1 against max_num_seqs, so m counts sequences, not prompts;
    minedraft/plugin/engine/llm_engine.py, LLMEnginePatch.__init__ sets the scheduler's cap to
    max_num_seqs * 2 under PSD (set_max_num_seqs_for_psd). Without prefix caching (vLLM V0's
    default, CacheConfig.enable_prefix_caching) each sample prefills its own prompt into its own
    blocks: setting7's m = 64 runs 128 sequences, 64 prompts' worth."""
    s = Scenario(requests=30, n=2, m=8, output_len=32, prompt_len=100, seed=0)
    psd, sd = simulate(s), simulate(s.replace(method="sd"))
    assert psd.steps["running"].max() == 2 * s.m and sd.steps["running"].max() == s.m
    rq = psd.requests
    assert len(rq["request"]) == 2 * s.requests and (np.bincount(rq["prompt"]) == 2).all()
    assert psd.steps["prefill_tokens"].sum() == rq["prompt_len"].sum() == 2 * s.requests * 100
    blocks_per_prompt = -(-100 // s.block_size)
    assert psd.steps["kind"][0] == "prefill" and psd.steps["kv_blocks"][0] == 2 * s.m * blocks_per_prompt
    assert load_scenario(preset="setting7").m == 64 and load_scenario(preset="setting7").n == 2


def test_the_drafter_gpus_own_profile_sizes_psds_pool_and_binds_for_an_8b_drafter():
    """minedraft/plugin/spec_decode/spec_decode_worker.py,
    ParallelSpecDecodeWorker.determine_num_available_blocks: the driver (the drafter GPU) answers
    with its proposer's profile (total x gpu_memory_utilization - the draft's weights, activations
    and non-torch memory, over the draft's KV block), the other ranks with the scorer's; the
    executor takes the minimum (vllm/executor/executor_base.py,
    ExecutorBase.determine_num_available_blocks) and every GPU allocates that many blocks, so one
    block table serves both models. An 8B drafter's full KV (147 kB a token for Qwen3-8B, 131 kB
    for Llama-3.1-8B) beside 16 GB of weights on an L40S at 0.65 binds before the verifier group."""
    for preset, draft in (("setting6", "llama-3.1-8b"), ("setting7", "qwen3-8b")):
        s = load_scenario(preset=preset)
        plan = plan_memory(s, CAT)
        model = CAT.models[draft]
        free = CAT.gpus[s.drafter_gpu_key].memory_gb * 1e9 * s.gpu_memory_utilization \
            - model.weight_bytes - s.activation_reserve_gb * 1e9
        assert plan.pools()["drafter"] == int(free // model.kv_bytes_per_token) // s.block_size
        assert plan.kv_blocks == plan.pools()["drafter"] < plan.pools()["verifier"]
    r = simulate(load_scenario(preset="setting7"))
    assert r.kv.binding == "drafter" and r.summary["kv_peak_usage"]["drafter"] > 0.99


def test_psd_recomputes_a_preempted_request_on_both_models_in_a_prefill_step():
    """vllm/core/scheduler.py, Scheduler._schedule_running preempts the last running request
    (whatever its sub-batch: minedraft/plugin/core/scheduler.py, SchedulerPatch._preempt only
    recycles its batch flag), by recompute for a one-sequence group (Scheduler._preempt): its
    blocks are freed on every GPU and it waits again, to prefill its prompt and its output so far
    (_schedule_prefills takes seq.get_len()). Under PSD that prefill step runs the target on the
    verifier group and then the draft model on the drafter GPU
    (spec_decode_worker.py, ParallelSpecDecodeWorker._run_no_spec: scorer_worker.execute_model,
    then proposer_worker.execute_model); it rejoins the sub-batch drafted next (tests/sim/test_batches.py)."""
    s = Scenario(requests=120, output_len=128, prompt_len=200, num_gpu_blocks_override=300, seed=2)
    r = simulate(s)
    rq, st = r.requests, r.steps
    preempted = rq["preemptions"] > 0
    assert r.summary["preemptions"] > 0 and (rq["recomputed_tokens"][preempted] > 200).all()
    assert (rq["recomputed_tokens"][~preempted] == 0).all()
    assert st["prefill_tokens"].sum() == rq["prompt_len"].sum() + rq["recomputed_tokens"].sum()
    prefill = st["kind"] == "prefill"
    assert (st["verify_s"][prefill] > 0).all() and (st["draft_s"][prefill] > 0).all()
    assert (rq["state"] == "finished").all()
