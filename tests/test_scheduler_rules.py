"""The scheduler's rules checked directly: victims, the watermark, rejection, queues."""

from __future__ import annotations

import numpy as np

from psdsim.sim.kv import KVPools
from psdsim.sim.requests import DECODING, REJECTED, WAITING, RequestTable
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
