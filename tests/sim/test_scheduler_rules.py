"""The scheduler's rules checked directly: victims, the watermark, rejection, queues."""

from __future__ import annotations

import numpy as np

from psdsim.sim.kv import KVPools
from psdsim.sim.requests import DECODING, REJECTED, WAITING, RequestTable
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario
from psdsim.sim.scheduler import EngineHooks, Scheduler
from psdsim.sim.workload import Workload


def _table(n: int, prompt: int = 16, output: int = 64) -> RequestTable:
    return RequestTable(Workload(np.zeros(n), np.full(n, prompt, dtype=np.int64),
                                 np.full(n, output, dtype=np.int64), np.full(n, 0.5),
                                 np.full(n, np.nan)))


def _scheduler(table: RequestTable, blocks: int, **kw) -> Scheduler:
    kv = KVPools({"verifier": blocks}, 16, table.n)
    opts = dict(version="vllm-v0", chunked=False, swap=False, swap_blocks=0, max_running=8,
                token_budget=2048)
    opts.update(kw)
    return Scheduler(table, kv, **opts)


def test_the_last_running_request_is_preempted_and_goes_to_the_front():
    t = _table(3)
    s = _scheduler(t, blocks=8)
    s.arrive_until(0.0)
    hooks = EngineHooks()
    plan = s.plan(hooks, 0.0)                     # prefill-only: all three, one block each
    assert plan.prefill.tolist() == [0, 1, 2] and s.kv.used == 3
    s.close_step(plan, 0.0, hooks)
    assert (t.state[:3] == DECODING).all()
    t.kv_len[:] = [40, 40, 40]                    # each now needs 3 blocks: 9 > 8
    plan = s.plan(hooks, 1.0)
    assert plan.preempted == 1 and plan.decode.tolist() == [0, 1]
    assert t.state[2] == WAITING and s.waiting.head() == 2
    assert t.recomputed[2] == 40 and t.prefill_len[2] == 40
    assert s.kv.used == 6 and s.kv.held[2] == 0


def test_admission_keeps_the_watermark_and_rejects_what_can_never_fit():
    t = _table(3, prompt=16 * 150)                # 150 blocks each
    s = _scheduler(t, blocks=301, token_budget=16 * 450)  # watermark: int(0.01 * 301) = 3 blocks
    s.arrive_until(0.0)
    plan = s.plan(EngineHooks(), 0.0)
    assert plan.prefill.tolist() == [0]           # a second would leave 1 < 3 blocks free
    assert s.kv.used == 150
    t2 = _table(1, prompt=16 * 400)
    s2 = _scheduler(t2, blocks=301, token_budget=16 * 400)
    s2.arrive_until(0.0)
    assert s2.plan(EngineHooks(), 0.0).empty and t2.state[0] == REJECTED and s2.done


def test_chunked_prefill_splits_a_prompt_across_steps():
    t = _table(1, prompt=100)
    s = _scheduler(t, blocks=100, chunked=True, token_budget=40)
    s.arrive_until(0.0)
    hooks = EngineHooks()
    chunks = []
    for step in range(3):
        plan = s.plan(hooks, float(step))
        chunks.append(int(plan.chunk.sum()))
        s.close_step(plan, float(step), hooks)
    assert chunks == [40, 40, 20] and t.state[0] == DECODING


def test_vllm_v1_cuts_draft_tokens_first():
    from psdsim.sim.scheduler import _truncate_drafts
    caps, left = _truncate_drafts(np.full(8, 5), 24)   # 8 decodes x (1 + 4) = 40 > 24
    assert caps.tolist() == [4, 4, 4, 4, 0, 0, 0, 0] and left == 0
    caps, left = _truncate_drafts(np.full(3, 5), 100)
    assert caps.tolist() == [4, 4, 4] and left == 85
    caps, _ = _truncate_drafts(np.array([5, 1, 5]), 8)  # a draft-less decode (PSD's draft batch)
    assert caps.tolist() == [4, 0, 1]


def _decoding(t: RequestTable, s: Scheduler, hooks: EngineHooks) -> None:
    """Admit every waiting request (one prefill-only step) and close that step."""
    s.arrive_until(0.0)
    plan = s.plan(hooks, 0.0)
    s.close_step(plan, 0.0, hooks)
    assert (t.state[plan.prefill] == DECODING).all()


def test_a_decode_needs_a_free_block_for_the_partly_written_one_it_holds():
    """vllm/core/block_manager.py `BlockSpaceManager.can_append_slots` counts the blocks an append
    touches (vllm/core/block/block_table.py `get_num_blocks_touched_by_append_slots`), the partly
    written last block among them: with the pool exactly full, the last running request is
    preempted although no request needs a new block."""
    t = _table(2, prompt=24)                      # 24 tokens: 2 blocks, the second half written
    s = _scheduler(t, blocks=4)                   # watermark: int(0.01 * 4) = 0 blocks
    hooks = EngineHooks()
    _decoding(t, s, hooks)
    assert s.kv.used == 4
    t.kv_len[:2] = 25                             # each decode's token goes into a held block
    plan = s.plan(hooks, 1.0)
    assert plan.preempted == 1 and plan.decode.tolist() == [0]
    assert t.state[1] == WAITING and s.kv.used == 2


def test_a_swap_in_needs_the_blocks_of_the_token_it_computes():
    """vllm/core/block_manager.py `BlockSpaceManager.can_swap_in` counts the blocks of all the
    request's tokens, the one this step computes included, and `Scheduler._schedule_swapped`
    (vllm/core/scheduler.py) appends that slot after the swap-in."""
    t = _table(2, prompt=32)                      # 2 full blocks each
    s = _scheduler(t, blocks=5, swap=True, swap_blocks=100)
    hooks = EngineHooks()
    _decoding(t, s, hooks)
    t.kv_len[:2] = 33                             # each needs a third block; one is free
    plan = s.plan(hooks, 1.0)
    assert plan.decode.tolist() == [0] and list(s.swapped) == [1] and plan.swap_blocks == 2
    s.close_step(plan, 1.0, hooks)
    t.kv_len[0] = 34
    plan = s.plan(hooks, 2.0)                     # 2 free: its 2 blocks, not the third
    assert plan.decode.tolist() == [0] and list(s.swapped) == [1]
    s.close_step(plan, 2.0, hooks)
    t.completed.append(np.array([0]))             # request 0 ends: 5 blocks free
    s.close_step(plan, 2.0, hooks)
    plan = s.plan(hooks, 3.0)
    assert plan.decode.tolist() == [1] and plan.swap_blocks == 2 and s.kv.held[1] == 3


def test_vllm_v1_preempts_only_for_new_blocks():
    """vllm/v1/core/kv_cache_manager.py `KVCacheManager.allocate_slots` asks the pool only for the
    blocks a request does not hold: a pool exactly full preempts no decode that needs none."""
    t = _table(2, prompt=24)
    s = _scheduler(t, blocks=4, version="vllm-v1", chunked=True)
    hooks = EngineHooks()
    s.arrive_until(0.0)
    plan = s.plan(hooks, 0.0)                     # both prompts whole, in one chunked step
    s.close_step(plan, 0.0, hooks)
    assert (t.state[:2] == DECODING).all() and s.kv.used == 4
    t.kv_len[:2] = 25
    plan = s.plan(hooks, 1.0)
    assert plan.preempted == 0 and plan.decode.tolist() == [0, 1]


def test_chunked_prefill_takes_a_whole_prompts_blocks_at_its_first_chunk():
    """vllm/core/scheduler.py `Scheduler._schedule_prefills` admits a prompt when the blocks of
    all its tokens fit (vllm/core/block_manager.py `can_allocate`), and `allocate` takes them at
    its first chunk; the continuing chunks take their budget first."""
    t = _table(2, prompt=100)                     # 7 blocks each
    s = _scheduler(t, blocks=100, chunked=True, token_budget=64)
    hooks = EngineHooks()
    s.arrive_until(0.0)
    plan = s.plan(hooks, 0.0)
    assert plan.prefill.tolist() == [0] and plan.chunk.tolist() == [64] and s.kv.held[0] == 7
    s.close_step(plan, 0.0, hooks)
    plan = s.plan(hooks, 1.0)
    assert plan.prefill.tolist() == [0, 1] and plan.chunk.tolist() == [36, 28]
    assert s.kv.held.tolist()[:2] == [7, 7]


def test_a_prompt_preempted_in_a_step_is_not_admitted_again_in_it():
    """vllm/core/scheduler.py `Scheduler._schedule_chunked_prefill` puts the step's recompute
    victims back in the waiting queue (`extendleft`) after `_schedule_prefills` has run."""
    t = _table(2, prompt=24)
    s = _scheduler(t, blocks=4, chunked=True)
    hooks = EngineHooks()
    _decoding(t, s, hooks)
    t.kv_len[:2] = 25                             # the pool is exactly full: request 1 goes
    plan = s.plan(hooks, 1.0)
    assert plan.preempted == 1 and plan.decode.tolist() == [0] and not len(plan.prefill)
    assert t.state[1] == WAITING and s.waiting.head() == 1 and plan.waiting == 1


def test_a_lone_request_that_preempts_itself_is_planned_again_at_once():
    """vllm/core/scheduler.py `Scheduler._schedule_running`: a request whose append touches more
    blocks than are free, with no other request to preempt, preempts itself; that engine step
    runs nothing and the next one admits it again (`_schedule_prefills`). psdsim's plan is that
    next step, so a lone request is never left waiting with nothing to wake it."""
    t = _table(1, prompt=24)                      # 2 blocks, the second half written
    s = _scheduler(t, blocks=2)
    hooks = EngineHooks()
    _decoding(t, s, hooks)
    t.kv_len[0] = 25                              # touches its partly written block: 1 > 0 free
    plan = s.plan(hooks, 1.0)
    assert plan.preempted == 1 and not plan.empty
    assert plan.prefill.tolist() == [0] and plan.chunk.tolist() == [25] and s.kv.used == 2


def test_a_swapped_request_the_pool_can_never_hold_again_ends_ignored():
    """vllm/core/scheduler.py `Scheduler._schedule_swapped`: when `BlockSpaceManager.can_swap_in`
    (vllm/core/block_manager.py) answers NEVER, the blocks of all its tokens and lookahead slots
    exceeding the pool less the watermark, the request ends FINISHED_IGNORED and leaves the
    swap space, instead of waiting there for ever."""
    t = _table(1, prompt=24)
    s = _scheduler(t, blocks=2, swap=True, swap_blocks=100)
    hooks = EngineHooks()
    _decoding(t, s, hooks)
    hooks.lookahead = 8                           # 25 + 8 tokens: 3 blocks of a 2-block pool
    t.kv_len[0] = 25
    plan = s.plan(hooks, 1.0)
    assert plan.empty and plan.preempted == 1 and plan.swap_blocks == 2
    assert t.state[0] == REJECTED and not s.swapped and s.swap_used == 0 and s.done


def test_pearl_with_one_request_on_a_tight_pool_finishes():
    """The case hypothesis found (tests/sim/test_invariants.py): PEARL's 2k - 1 lookahead slots make
    the lone request's append touch more blocks than are free late in its output, so it preempts
    itself; the run goes on as vLLM's engine does instead of stopping as stalled."""
    s = Scenario(method="pearl", k=7, m=1, requests=1, n=2, num_gpu_blocks_override=10,
                 max_model_len=128, max_num_batched_tokens=2048, prompt_len=77, output_len=40,
                 acceptance=0.5, swap_space_gb=4.0, seed=44)
    summary = simulate(s).summary
    assert summary["preemptions"] >= 1 and summary["rejected"] == summary["aborted"] == 0
    assert summary["fits"] and summary["makespan_s"] > 0
