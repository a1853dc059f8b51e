"""MineDraft's code, rule by rule (docs/minedraft-fidelity.md): each test builds the
situation by hand and checks the simulator against what the code does; its docstring names the
code's file and function (electron-shaders/MineDraft unless it starts with vllm/)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from psdsim.cli import main
from psdsim.sim.acceptance import AcceptanceSampler
from psdsim.sim.kv import KVPools
from psdsim.sim.methods.pearl import PEARL
from psdsim.sim.methods.sub_batching import BatchManagerSubBatching
from psdsim.sim.records import StepRecord
from psdsim.sim.requests import ABORTED, DECODING, PREFILLING, WAITING, RequestTable
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario, load_scenario
from psdsim.sim.scheduler import EngineHooks, Scheduler, StepPlan
from psdsim.sim.workload import Workload


def _table(n: int, prompt: int = 16, output: int = 64) -> RequestTable:
    return RequestTable(Workload(np.zeros(n), np.full(n, prompt, dtype=np.int64),
                                 np.full(n, output, dtype=np.int64), np.full(n, 0.5),
                                 np.full(n, np.nan)))


# -- 1. KV: appending slots to a sequence that emitted nothing allocates nothing ---------------

def test_a_verified_request_needs_no_new_block_after_it_was_drafted():
    """vllm/core/block/block_table.py, BlockTable.append_token_ids -> ensure_num_empty_slots
    returns at once when the table already has len(unseen tokens) + lookahead empty slots. A
    request is drafted (its sub-batch appends context + k slots, minedraft/plugin/core/scheduler.py
    SchedulerPatch._schedule_running), then verified a step later having emitted nothing: its
    append, which the has_deferred patch skips, would have allocated nothing."""
    k, block = 3, 4
    kv = KVPools({"verifier": 100}, block, 2)
    ids = np.array([0, 1])
    context = np.array([13, 16])
    assert kv.ensure(ids, context, k)                  # drafted: 16 and 19 slots -> 4 + 5 blocks
    used = kv.used
    assert used == 9
    assert kv.ensure(ids, context, k) and kv.used == used    # verified, unchanged: a no-op
    assert kv.ensure(ids, context + 2, k) and kv.used > used   # it emitted 2 tokens: it grows


# -- 3. chunked prefill: chunks a method does not compute close as the engine closes them -------

class _Computes(EngineHooks):
    """A method that computes only the prompt chunks of the requests in `computed`."""

    def __init__(self, computed: set[int]) -> None:
        self.computed = computed

    def computes_chunks(self, prefill: np.ndarray, decode: np.ndarray) -> np.ndarray | None:
        return np.array([r in self.computed for r in prefill.tolist()])


def test_an_uncomputed_earlier_chunk_is_marked_computed_and_a_last_chunk_is_rescheduled():
    """minedraft/plugin/spec_decode/spec_decode_worker.py, ParallelSpecDecodeWorker
    ._create_output_sampler_list pads the drafted sub-batch's rows with -1;
    minedraft/plugin/engine/llm_engine.py, LLMEnginePatch._process_model_outputs skips an output
    whose token is -1 before update_num_computed_tokens. A non-final chunk has no sampled token
    and is marked computed anyway; a final one is skipped and scheduled again."""
    t = RequestTable(Workload(np.zeros(3), np.array([100, 30, 100], dtype=np.int64),
                              np.full(3, 8, dtype=np.int64), np.full(3, 0.5), np.full(3, np.nan)))
    s = Scheduler(t, KVPools({"verifier": 200}, 16, 3), version="vllm-v0", chunked=True, swap=False,
                  swap_blocks=0, max_running=8, token_budget=170)
    s.arrive_until(0.0)
    hooks = _Computes({2})          # only request 2's sub-batch is verified this step
    plan = s.plan(hooks, 0.0)       # chunks: 100 (0, whole), 30 (1, whole), 40 (2, partial)
    assert plan.prefill.tolist() == [2] and plan.chunk.tolist() == [40]
    assert plan.uncomputed.tolist() == [0, 1] and plan.marked.tolist() == [0, 0]  # last chunks
    assert plan.prefill_groups == 3
    s.close_step(plan, 0.0, hooks)
    assert t.computed.tolist() == [0, 0, 40] and (t.state == PREFILLING).all()

    t2 = _table(1, prompt=100)
    s2 = Scheduler(t2, KVPools({"verifier": 200}, 16, 1), version="vllm-v0", chunked=True,
                   swap=False, swap_blocks=0, max_running=8, token_budget=40)
    s2.arrive_until(0.0)
    skipped = _Computes(set())
    plan = s2.plan(skipped, 0.0)    # a first chunk of 40 of 100, in the drafted sub-batch
    assert plan.uncomputed.tolist() == [0] and plan.marked.tolist() == [40] and not len(plan.prefill)
    s2.close_step(plan, 0.0, skipped)
    assert t2.computed[0] == 40     # marked, though nothing computed its KV
    plan = s2.plan(skipped, 1.0)
    s2.close_step(plan, 1.0, skipped)
    assert t2.computed[0] == 80
    plan = s2.plan(skipped, 2.0)    # the last chunk (20) is not marked: scheduled again
    assert plan.marked.tolist() == [0]
    s2.close_step(plan, 2.0, skipped)
    assert t2.computed[0] == 80 and t2.state[0] == PREFILLING
    plan = s2.plan(_Computes({0}), 3.0)  # its sub-batch is verified: computed, done
    assert plan.chunk.tolist() == [20] and plan.completes.tolist() == [True]
    s2.close_step(plan, 3.0, EngineHooks())
    assert t2.state[0] == DECODING


# -- 10. a request lost from the sub-batch holding drafts: where MineDraft's worker raises ------

def test_a_request_lost_after_its_sub_batch_was_drafted_is_where_minedrafts_worker_raises():
    """spec_decode_worker.py, ParallelSpecDecodeWorker._track_preempted_requests masks the
    proposals of a preempted request of the sub-batch drafted in the last step, but
    _prepare_previous_proposals compares the batch with len(mask), not its count: a shorter
    batch takes the chunked-prefill branch with non_spec_len < 0 and `new_mask[non_spec_len:] =
    mask` raises (MineDraft's own function, called on CPU with 8 requests drafted and one
    preempted or aborted: "The expanded size of the tensor (1) must match the existing size (8)";
    an aborted request is not even masked). vLLM's victim is the last running request, whichever
    sub-batch holds it (vllm/core/scheduler.py, Scheduler._schedule_running): a request of the
    sub-batch about to be drafted leaves nothing behind, one of the sub-batch holding drafts
    stops the engine. psdsim counts such a verification and goes on with the others' drafts."""
    sb = BatchManagerSubBatching(8, Scenario(), lookahead=3)
    sb.flag[:] = [True, False] * 4
    sb.graduated(np.arange(8))                # True: 0, 2, 4, 6; False: 1, 3, 5, 7
    plan, state = StepPlan(), np.full(8, DECODING)
    plan.decode = np.arange(8)
    v, ahead = sb.turn(plan, StepRecord())    # the first decode: True drafted and verified now
    assert (v, ahead, sb.lost_drafted) == (1, 0, 0)
    sb.verified(v, ahead)                     # False drafted beside the pass: its drafts wait
    state[4] = WAITING                        # preempted from True, about to be drafted
    sb.left(np.array([4]), state)
    v, ahead = sb.turn(plan, StepRecord())
    assert (v, ahead, sb.lost_drafted) == (0, 1, 0)
    sb.verified(v, ahead)                     # True (0, 2, 6) drafted beside the pass
    state[6] = WAITING                        # preempted from True, which holds drafts
    state[2] = ABORTED                        # aborted from it as well
    sb.left(np.array([2, 6]), state)
    v, ahead = sb.turn(plan, StepRecord())
    assert (v, ahead, sb.lost_drafted) == (1, 0, 2)   # verifies 0 alone: the code raises here
    sb.verified(v, ahead)
    v, ahead = sb.turn(plan, StepRecord())
    assert (v, sb.lost_drafted) == (0, 0)


def test_a_run_says_where_minedrafts_worker_would_have_stopped_it():
    """The previous rule over whole runs: setting7 (Qwen3-8B's KV binds on its drafter GPU)
    preempts twice on ShareGPT, once from the sub-batch holding drafts; aborts take requests
    from it too; a run that loses none from it says nothing."""
    stops = "MineDraft's code stops this run"
    tight = simulate(load_scenario(preset="setting7"))
    assert tight.summary["preemptions"] == 2
    assert [w for w in tight.summary["warnings"] if stops in w and "1 decode step(s)" in w]
    aborts = simulate(Scenario(requests=200, rate=20.0, abort_fraction=0.3, abort_window_s=2.0, seed=1))
    assert aborts.summary["aborted"] > 0 and any(stops in w for w in aborts.summary["warnings"])
    loose = simulate(load_scenario(preset="setting7", overrides=["dataset=arena"]))
    assert loose.summary["preemptions"] == 0 and not any(stops in w for w in loose.summary["warnings"])
    assert not any(stops in w for w in simulate(Scenario(requests=100)).summary["warnings"])


# -- whole runs ------------------------------------------------------------------------------

SWAPPING = dict(requests=400, output_len=128, seed=1, num_gpu_blocks_override=700, preemption_mode="swap")


def _summary_without(r, *keys: str) -> dict:
    return {k: v for k, v in r.summary.items() if k not in ("warnings", *keys)}


def test_the_has_deferred_patch_holds_the_blocks_of_plain_vllm():
    """minedraft/plugin/core/scheduler.py, SchedulerPatch._schedule_running (`should_append_slot`)
    with vllm/core/block/block_table.py, BlockTable.ensure_num_empty_slots: the appends the patch
    skips were no-ops, so MineDraft's run is plain vLLM's, block for block, step for step; only
    the intended saving (kv_patch = intended) changes anything."""
    tight = dict(k=8, block_size=4, num_gpu_blocks_override=400, prompt_len=64, output_len=64,
                 requests=120, max_model_len=256, seed=0)
    code = simulate(Scenario(**tight, kv_patch="has_deferred"))
    vllm = simulate(Scenario(**tight, kv_patch="default"))
    assert _summary_without(code) == _summary_without(vllm)
    assert (code.steps["kv_blocks"] == vllm.steps["kv_blocks"]).all()
    intended = simulate(Scenario(**tight, kv_patch="intended"))
    assert intended.steps["kv_blocks"].sum() < code.steps["kv_blocks"].sum()


def test_psd_computes_only_the_verified_sub_batchs_prompt_chunks():
    """minedraft/plugin/spec_decode/spec_decode_worker.py, ParallelSpecDecodeWorker
    ._split_batched_requests: prompts whose batch_flag is not _send_batch_flag go with the drafted
    sub-batch to the proposer, which proposes nothing for prompts and runs no pass for them."""
    s = Scenario(m=2, requests=8, enable_chunked_prefill=True)
    refill = BatchManagerSubBatching(8, s, lookahead=3)
    refill.flag[:] = [True, False, True, False, True, False, True, False]
    refill.graduated(np.array([0, 1, 2, 3]))        # decoding: 0, 2 in True; 1, 3 in False
    prompts, decodes = np.array([4, 5, 6, 7]), np.array([0, 1, 2, 3])
    assert refill.send is True                       # the coming step verifies True
    assert refill.computes_chunks(prompts, decodes).tolist() == [True, False, True, False]
    assert refill.computes_chunks(prompts, np.array([], dtype=np.int64)) is None  # prefill-only step
    refill.send = False
    assert refill.computes_chunks(prompts, decodes).tolist() == [False, True, False, True]
    every = BatchManagerSubBatching(8, s.replace(psd_prefill_chunks="every-pass"), lookahead=3)
    every.flag[:] = refill.flag
    every.graduated(np.array([0, 1, 2, 3]))
    assert every.computes_chunks(prompts, decodes) is None


def test_chunked_prompts_graduate_only_when_their_sub_batch_is_verified():
    """The consequence of ParallelSpecDecodeWorker._split_batched_requests and
    LLMEnginePatch._process_model_outputs: a prompt completes in a step that verifies its
    sub-batch, is drafted in the next and verified after, never without drafts; with every chunk
    computed in every pass (the what-if) prompts graduate into the sub-batch verified next."""
    burst = dict(requests=200, output_len=64, seed=1, rate=50.0, enable_chunked_prefill=True,
                 max_num_batched_tokens=512)
    code = simulate(Scenario(**burst))
    every = simulate(Scenario(**burst, psd_prefill_chunks="every-pass"))
    assert code.summary["wasted_verifications"] == 0 < every.summary["wasted_verifications"]
    assert code.summary["mixed_steps"] > 0
    assert any("psd_prefill_chunks" in w for w in code.summary["warnings"])
    assert not any("psd_prefill_chunks" in w for w in every.summary["warnings"])


def test_paper_metrics_leave_out_steps_that_schedule_a_prompt():
    """minedraft/plugin/engine/llm_engine.py, LLMEnginePatch.step (`is_prompt_run =
    num_prefill_groups`) and benchmarks/trace/analyze_traces.py, get_step_stats (throughput, VSR,
    parallelization over steps that are not prompt runs); the generated count is
    spec_decode_worker.py _verify_tokens' `generated_num` (accepted + 1 per verified request)."""
    r = simulate(Scenario(requests=120, output_len=64, seed=2, rate=40.0, enable_chunked_prefill=True,
                          max_num_batched_tokens=512))
    st, sm = r.steps, r.summary
    prompt_run = st["prefill_groups"] > 0
    decode = (st["kind"] == "decode") & ~prompt_run
    assert sm["mixed_steps"] == int(((st["kind"] == "decode") & prompt_run).sum()) > 0
    assert sm["decode_steps"] == int(decode.sum())
    gen = st["accepted"][decode] + st["verified"][decode]
    dur = (st["end_s"] - st["start_s"])[decode]
    assert sm["throughput_tok_s"] == gen.sum() / dur.sum()
    assert sm["vsr"] == st["accepted"][decode].sum() / st["proposed"][decode].sum()
    n80 = int(decode.sum() * 0.8)
    assert sm["vsr_trim80"] == st["accepted"][decode][:n80].sum() / st["proposed"][decode][:n80].sum()
    assert sm["parallelization_rate"] == st["parallelised"][decode].sum() / decode.sum()
    wider = st["kind"] == "decode"
    assert sm["throughput_tok_s_incl_mixed"] == (st["generated"][wider].sum()
                                                 / (st["end_s"] - st["start_s"])[wider].sum())


def test_generated_counts_tokens_past_max_tokens_as_the_worker_does():
    """spec_decode_worker.py, ParallelSpecDecodeWorker._verify_tokens: `generated_num =
    (accepted_token_ids >= 0).sum()`, before the engine's output processing stops a sequence at
    max_tokens: a request's last step counts all its accepted drafts + 1."""
    r = simulate(Scenario(requests=40, m=4, output_len=10, seed=3, acceptance=0.9))
    st = r.steps
    decode = st["kind"] == "decode"
    paper = (st["accepted"] + st["verified"])[decode]
    assert (paper >= st["generated"][decode]).all()
    assert paper.sum() > st["generated"][decode].sum()          # some last steps overshot
    dur = (st["end_s"] - st["start_s"])[decode]
    assert r.summary["throughput_tok_s"] == paper.sum() / dur.sum()
    assert r.summary["throughput_tok_s_incl_mixed"] == st["generated"][decode].sum() / dur.sum()


def test_a_swapped_in_request_is_verified_in_its_step_without_drafts_and_shifts_the_others():
    """minedraft/plugin/core/scheduler.py, SchedulerPatch._schedule_swapped (runs after
    _schedule_running flipped the flag: the request joins the verified sub-batch) and
    spec_decode_worker.py, ParallelSpecDecodeWorker._prepare_previous_proposals (a batch longer
    than its proposal mask takes the chunked-prefill branch: proposals shift by the newcomers).
    In a step that swapped requests in and scores drafts made a step earlier, every draft meets
    the wrong request: nothing is accepted, and the first requests carry none."""
    code = simulate(Scenario(**SWAPPING))
    st = code.steps
    swap_in = (st["swap_s"] > 0) & (st["preempted"] == 0) & (st["kind"] == "decode") & st["parallelised"]
    misaligned = swap_in & (st["unproposed"] > 0)
    assert misaligned.sum() > 5
    assert (st["accepted"][misaligned] == 0).all() and (st["proposed"][misaligned] > 0).all()
    assert (st["generated"][misaligned] <= st["verified"][misaligned]).all()  # one token each
    intended = simulate(Scenario(**SWAPPING, swap_in_batch="drafted"))
    assert code.summary["wasted_verifications"] > 0 == intended.summary["wasted_verifications"]
    assert any("swap_in_batch" in w for w in code.summary["warnings"])


def test_pearl_scores_stale_drafts_and_by_default_they_accept_nothing():
    """spec_decode_worker.py, ParallelSpecDecodeWorker._prepare_previous_proposals (PEARL: every
    request's pre-drafted tokens are used while any is valid) and spec_decode/mqa_scorer.py,
    ParallelMQAScorer.start_score_proposals (appended after the real output tokens, scored like
    any proposal): stale drafts take target positions and count as verified. By default
    (pearl_stale = rejected, the lower bound) they accept nothing, and every run says so;
    as-fresh, the upper bound, accepts them like fresh drafts (PEARL would then gain with m,
    against the paper's measured trend, tests/sim/test_methods.py::
    test_pearl_degrades_as_m_grows_and_falls_below_sd_at_16)."""
    base = dict(method="pearl", requests=60, m=8, output_len=64, seed=4)
    code = simulate(Scenario(**base))
    st = code.steps
    decode = st["kind"] == "decode"
    sd = simulate(Scenario(**{**base, "method": "sd"}))
    assert code.summary["vsr"] < 0.8 * sd.summary["vsr"]    # stale drafts scored, none accepted
    assert st["proposed"][decode].sum() > st["verified"][decode].sum()  # drafts are scored
    fresh = simulate(Scenario(**base, pearl_stale="as-fresh"))
    assert abs(fresh.summary["vsr"] - sd.summary["vsr"]) < 0.05  # the acceptance model's own
    assert fresh.summary["throughput_tok_s"] > code.summary["throughput_tok_s"]
    assert [w.split(":")[0] for w in code.summary["warnings"]] == ["lower bound"]
    assert [w.split(":")[0] for w in fresh.summary["warnings"]] == ["hypothetical"]
    assert not simulate(Scenario(**base, pearl_variant="per-request")).summary["warnings"]  # none stale


class _Uniforms(AcceptanceSampler):
    """Every acceptance draw sees the same uniform U (ln U = `log_u`), so the leading run of a
    request with per-token acceptance a is floor(ln U / ln a), capped at its drafts."""

    def __init__(self, log_u: float) -> None:
        super().__init__(np.random.default_rng(0))
        self.log_u = log_u

    def _take(self, n: int) -> np.ndarray:
        return np.full(n, self.log_u)


def _verify_one_valid_one_stale(**stale: object) -> tuple[np.ndarray, np.ndarray]:
    """A PEARL step built by hand: request 0 holds valid pre-drafted tokens, request 1 stale ones,
    both score k = 3 drafts; each request's own acceptance is 0.5, and U = 0.2^1.5, so a request
    accepting a per token accepts floor(1.5 ln 0.2 / ln a): 3 of 3 at a = 0.5, 1 at 0.2, none at 0.
    Returns (accepted, valid afterwards)."""
    s = Scenario(method="pearl", k=3, **stale)
    table = _table(2)
    table.arrive_until(0.0)
    assert [table.take(), table.take()] == [0, 1]   # the requests in slots 0 and 1
    table.state[:] = DECODING
    sim = SimpleNamespace(scenario=s, table=table, acceptance=_Uniforms(1.5 * np.log(0.2)), all_accepted=None)
    pearl = PEARL(sim)
    ids, proposed = np.array([0, 1]), np.array([3, 3])
    pearl.valid[ids], pearl.drafted[ids] = [True, False], True
    pearl._verify(ids, proposed, int(proposed.sum()), StepRecord())
    return table.last_accepted[ids].copy(), pearl.valid[ids].copy()


def test_a_stale_draft_is_accepted_as_pearl_stale_says_by_the_leading_run_rule():
    """spec_decode/mqa_scorer.py, ParallelMQAScorer.start_score_proposals scores a stale request's
    pre-drafted tokens after its real output tokens, and the rejection sampler keeps the leading
    accepted run, as for any proposal; spec_decode_worker.py,
    ParallelSpecDecodeWorker._run_speculative_decoding_step then marks a request's next
    pre-drafted tokens valid when it accepted them all (has_accepted_all). How often a stale token
    matches is not in the code: rejected (0), rate (pearl_stale_acceptance) and as-fresh (the
    request's own acceptance) are the simulator's models of it."""
    accepted, valid = _verify_one_valid_one_stale()                       # rejected
    assert accepted.tolist() == [3, 0] and valid.tolist() == [True, False]
    accepted, valid = _verify_one_valid_one_stale(pearl_stale="rate", pearl_stale_acceptance=0.2)
    assert accepted.tolist() == [3, 1] and valid.tolist() == [True, False]
    accepted, valid = _verify_one_valid_one_stale(pearl_stale="rate", pearl_stale_acceptance=0.0)
    assert accepted.tolist() == [3, 0]
    accepted, valid = _verify_one_valid_one_stale(pearl_stale="rate", pearl_stale_acceptance=1.0)
    assert accepted.tolist() == [3, 3]
    accepted, valid = _verify_one_valid_one_stale(pearl_stale="as-fresh")
    assert accepted.tolist() == [3, 3] and valid.tolist() == [True, True]  # stale, all accepted: valid
    runs = [_verify_one_valid_one_stale(pearl_stale="rate", pearl_stale_acceptance=x)[0][1]
            for x in np.linspace(0.0, 1.0, 21)]
    assert runs == sorted(runs) and runs[0] == 0 and runs[-1] == 3   # monotone in the rate


def _pearl(**changes: object) -> dict:
    return simulate(Scenario(method="pearl", requests=60, m=8, output_len=64, acceptance=0.6,
                             acceptance_spread=200.0, **changes)).summary


def test_pearl_throughput_grows_with_the_stale_acceptance_between_the_bounds():
    """A higher stale acceptance can only lengthen a stale request's leading run for the same
    uniform (the hand-built test above), so PEARL's throughput rises from the lower bound
    (rejected, which is rate 0 bit for bit) to the upper one (as-fresh; each request's own
    acceptance is about 0.6 here, above every rate tried). Over a whole run the same seed's
    uniforms meet other requests once trajectories part, so one seed can dip by a percent at a
    step of 0.1 (seed 14 does); the mean over seeds 1-3 (common random numbers) is checked."""
    rejected = _pearl(seed=1)
    zero = _pearl(seed=1, pearl_stale="rate", pearl_stale_acceptance=0.0)
    assert {k: v for k, v in zero.items() if k != "warnings"} == \
        {k: v for k, v in rejected.items() if k != "warnings"}
    rates = [dict(pearl_stale="rate", pearl_stale_acceptance=x) for x in (0.1, 0.2, 0.3, 0.4, 0.5)]
    models = [dict(), *rates, dict(pearl_stale="as-fresh")]
    series = [float(np.mean([_pearl(seed=seed, **model)["throughput_tok_s"] for seed in (1, 2, 3)]))
              for model in models]
    assert series == sorted(series) and series[0] < series[-1], series


@pytest.mark.parametrize("sets, field", [
    (["pearl_stale_acceptance=1.5", "pearl_stale=rate"], "pearl_stale_acceptance"),
    (["pearl_stale_acceptance=-0.1", "pearl_stale=rate"], "pearl_stale_acceptance"),
    (["pearl_stale_acceptance=0.3"], "pearl_stale_acceptance"),            # rejected ignores it
    (["pearl_stale_acceptance=0.3", "pearl_stale=as-fresh"], "pearl_stale_acceptance"),
    (["pearl_stale=0.3"], "pearl_stale"),
])
def test_a_bad_stale_acceptance_is_one_line_naming_the_field(sets: list[str], field: str, capsys):
    code = main(["run", "--no-write", "--method", "pearl", *[a for s in sets for a in ("--set", s)]])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith(f"psdsim: error: {field}: ") and "fix:" in err


def test_pearl_drafts_v0s_extra_row_for_a_request_whose_drafts_were_all_accepted():
    """spec_decode_worker.py, ParallelSpecDecodeWorker._run_speculative_decoding_step (PEARL:
    proposer_worker.get_spec_proposals(mock_execute_model_req, _seq_with_bonus_token_in_last_step),
    the set left by the last verification); vllm/spec_decode/spec_decode_worker.py,
    SpecDecodeWorker._track_sequences_with_bonus_tokens (a sequence is in it when the last column
    of its accepted tokens holds a token: all its drafts accepted); vllm/spec_decode/
    multi_step_worker.py, MultiStepWorker._expand_execute_model_request (one more row per such
    sequence in every draft pass). One request alone: each step's drafting ahead has an extra row
    exactly when the step before accepted every draft it scored; the roofline engine has none."""
    s = Scenario(method="pearl", requests=1, m=1, k=3, output_len=64, prompt_len=32, acceptance=0.8,
                 engine="vllm-0.9.2-v0-eager", seed=3)
    st = simulate(s).steps
    d = st["kind"] == "decode"
    proposed, accepted, extra = st["proposed"][d], st["accepted"][d], st["extra_rows"][d]
    all_accepted = (proposed > 0) & (accepted == proposed)
    assert extra[0] == 0 and (extra[1:] == all_accepted[:-1]).all()
    assert 0 < extra.sum() < len(extra)
    assert not simulate(s.replace(engine="roofline")).steps["extra_rows"].any()


# -- 9. the parallelization rate and the tail of an offline run --------------------------------

def _tail_run(**changes) -> Scenario:
    """6 prompts, 2 slots a sub-batch: refills' prompt steps mid-run, then a drain in which one
    sub-batch empties while the other still holds both its requests (seed 1, wide acceptance)."""
    return Scenario(method="psd", requests=6, m=2, k=2, output_len=64, prompt_len=32, seed=1,
                    acceptance_spread=1.0, **changes)


def _worker_is_parallelised(steps: dict[str, np.ndarray]) -> np.ndarray:
    """ParallelSpecDecodeWorker's `is_parallelised`, replayed over a step table: a decode step is
    parallelised when proposals drafted earlier are waiting (`_previous_proposals is not None`).
    The last decode step leaves them when it drafted a non-empty other sub-batch
    (`_previous_proposals = proposals2`) and clears them otherwise; a prompt-only step runs
    `_run_no_spec`, which leaves them as they are."""
    flags = np.zeros(len(steps["kind"]), dtype=bool)
    waiting = False
    for i, (kind, drafted) in enumerate(zip(steps["kind"], steps["drafted"], strict=True)):
        if kind == "decode":
            flags[i], waiting = waiting, bool(drafted)
    return flags


def test_the_parallelization_rate_counts_the_steps_minedrafts_analysis_counts():
    """spec_decode_worker.py, ParallelSpecDecodeWorker._run_speculative_decoding_step
    (`is_parallelised = self._previous_proposals is not None`; `_previous_proposals = proposals2`
    only when the other sub-batch is non-empty) and _run_no_spec (prompt steps leave it);
    benchmarks/trace/analyze_traces.py, get_step_stats and analyze_plots.ipynb ("Parallelized
    fraction": sum(step_parallelized) / steps that are not `is_prompt_run`). The first decode step,
    the decode step after a mid-run prompt step and every tail step are in the denominator."""
    r = simulate(_tail_run())
    st = r.steps
    decode = np.flatnonzero(st["kind"] == "decode")
    prompt_run = st["prefill_groups"] > 0
    refills = [i for i in np.flatnonzero(prompt_run) if decode[0] < i < decode[-1]]
    one_empty = decode[(st["batch0"][decode] == 0) | (st["batch1"][decode] == 0)]
    assert refills and len(one_empty) >= 3, "the run must refill mid-run and end in a tail"
    flags = _worker_is_parallelised(st)
    assert (st["parallelised"] == flags).all()
    assert not flags[decode[0]] and all(flags[i + 1] for i in refills)
    assert flags[one_empty[0]] and not flags[one_empty[1:]].any()
    counted = ~prompt_run
    assert counted.sum() == len(decode) == r.summary["decode_steps"]
    assert r.summary["parallelization_rate"] == flags[counted].sum() / counted.sum()


@pytest.mark.parametrize("rebalance", [False, True])
def test_the_drain_keeps_the_last_sub_batch_whole_and_verifies_it_every_step(rebalance):
    """minedraft/plugin/core/scheduler.py: a running request's `batch_flag` is set only when it is
    admitted or swapped in (`_get_next_batch_flag` from `_schedule_prefills` / `_schedule_swapped`)
    and cleared when it leaves (`_recycle_batch_flag`): nothing re-splits the running requests, so
    once one sub-batch has emptied with nothing waiting, the other runs alone to the end.
    spec_decode_worker.py, ParallelSpecDecodeWorker._split_batched_requests ("Corner case: one
    sub-batch is empty": `is_sending_batch[:] = True`, no other batch): each of those steps
    verifies every remaining request and drafts nothing ahead. `rebalance` changes where refills
    go, and there are none in the drain."""
    st = simulate(_tail_run(rebalance=rebalance)).steps
    decode = np.flatnonzero(st["kind"] == "decode")
    empty = (st["batch0"][decode] == 0) | (st["batch1"][decode] == 0)
    first = int(np.argmax(empty))
    tail = decode[first:]
    assert empty[first:].all() and (st["waiting"][tail] == 0).all()
    remaining = st["batch0"][tail] + st["batch1"][tail]
    assert remaining[0] == 2
    assert (st["verified"][tail] == remaining).all() and not st["drafted"][tail].any()
    assert (st["batch1"][tail] == 0).all() or (st["batch0"][tail] == 0).all()
