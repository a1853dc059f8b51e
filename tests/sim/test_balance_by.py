"""Balancing PSD's two sub-batches by the KV tokens their requests hold (`balance_by = "kv"`),
beside MineDraft's balance by request count (minedraft/plugin/core/scheduler.py, SchedulerPatch
`_get_next_batch_flag`: `balance` counts requests). The paper lists balance by count alone,
while requests differ in KV, among its limits (§A)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from psdsim.sim.errors import ScenarioError
from psdsim.sim.methods.sub_batching import BatchManagerSubBatching
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario, validate


def _manager(balance_by: str, kv: list[int]) -> BatchManagerSubBatching:
    """Slot 0 (a 5,000-token request) runs in the True sub-batch, slot 1 (100 tokens) in False;
    slots 2 and 3 are being admitted; `rebalance` keeps the balance rule after decoding starts."""
    running = np.arange(len(kv), dtype=np.int64)
    scheduler = SimpleNamespace(running=running, v1=False,
                                table=SimpleNamespace(kv_len=np.array(kv, dtype=np.int64)))
    s = Scenario(rebalance=True, balance_by=balance_by)
    sb = BatchManagerSubBatching(len(kv), s, lookahead=3, scheduler=scheduler)  # type: ignore[arg-type]
    sb.flag[:2] = [True, False]
    sb.batches.balance = 0           # one request in each: #False - #True
    sb.batches.decoding = True
    return sb


def test_kv_balance_sends_newcomers_to_the_sub_batch_holding_fewer_kv_tokens():
    kv = [5000, 100, 50, 6000]
    by_count = _manager("requests", kv)
    by_count.admitted(np.array([2, 3]), mixed=False, restart=False)
    assert by_count.flag[2:].tolist() == [True, False]   # the count is even: True first (balance >= 0)
    by_kv = _manager("kv", kv)
    by_kv.admitted(np.array([2, 3]), mixed=False, restart=False)
    # True holds 5,000 tokens, False 100: both join False (100 + 50 = 150 is still the lighter)
    assert by_kv.flag[2:].tolist() == [False, False]
    assert by_kv.batches.balance == 2   # the request count is kept for recycle() all the same


def test_equal_kv_falls_back_to_the_count_rule():
    sb = _manager("kv", [300, 300, 10])
    sb.admitted(np.array([2]), mixed=False, restart=False)
    assert sb.flag[2]   # 300 against 300: balance 0 -> True, as MineDraft's rule


def _alternating_trace(path: Path) -> Path:
    """64 requests arriving at once, long and short prompts in turn: the count rule's alternation
    puts every long prompt in one sub-batch."""
    rows = ["arrival_s,prompt_tokens,output_tokens"]
    rows += [f"0,{6000 if i % 2 == 0 else 100},64" for i in range(64)]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_kv_balance_evens_a_constructed_imbalance(tmp_path: Path):
    trace = _alternating_trace(tmp_path / "alternating.csv")
    runs = {b: simulate(Scenario(trace=str(trace), balance_by=b, m=16, max_model_len=8192,
                                 max_num_batched_tokens=8192)) for b in ("requests", "kv")}

    def swing(r) -> float:  # how much consecutive decode steps' verification differs (sub-batches alternate)
        verify = np.asarray(r.steps["verify_s"])[np.asarray(r.steps["kind"]) == "decode"]
        return float(np.abs(np.diff(verify)).mean())

    assert swing(runs["kv"]) < 0.5 * swing(runs["requests"])
    assert runs["kv"].summary["throughput_tok_s"] > 1.03 * runs["requests"].summary["throughput_tok_s"]
    for r in runs.values():   # same requests, all finished
        assert (r.requests["state"] == "finished").all()


@pytest.mark.parametrize("fields", [dict(method="sd"), dict(method="psd", sub_batches=3),
                                    dict(balance_by="tokens")])
def test_balance_by_is_refused_where_it_is_not_built(fields):
    with pytest.raises(ScenarioError) as e:
        validate(Scenario(**{"balance_by": "kv", **fields}))
    assert e.value.field == "balance_by"
