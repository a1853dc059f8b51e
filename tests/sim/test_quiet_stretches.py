"""AR's quiet stretches (sim/methods/ar.py) change nothing: a run that takes them gives
the summary, step table and request columns of the same run stepping one step at a time, bit for
bit, whatever the scenario (arrivals, aborts, preemption by recompute or swap, fan-out, chunked
prefill and the V1 scheduler, where there are none, the engine model); and they do run where the
issue needs them, so that these tests are not vacuous. KVPools.ahead is held to `ensure` called
plan after plan."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psdsim.sim import quiet
from psdsim.sim.kv import KVPools
from psdsim.sim.methods.ar import AutoRegressive
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario
from tests.helpers.scenarios import assert_same, run_everything


def _stepwise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(AutoRegressive, "quiet_steps", lambda self, plan: 0)


def _both(s: Scenario, monkeypatch: pytest.MonkeyPatch) -> None:
    quick = run_everything(s)
    with monkeypatch.context() as patch:
        _stepwise(patch)
        assert_same(quick, run_everything(s))


CASES = {
    "closed": {},
    "arrivals-aborts": {"rate": 30.0, "abort_fraction": 0.3, "abort_window_s": 0.5},
    "tight-recompute": {"num_gpu_blocks_override": 60, "prompt_len": 200},
    "tight-swap": {"num_gpu_blocks_override": 60, "prompt_len": 200, "preemption_mode": "swap"},
    "fan-out": {"n": 3, "requests": 20},
    "eager-engine": {"engine": "vllm-0.9.2-v0-eager", "rate": 15.0},
    "chunked": {"enable_chunked_prefill": True, "max_num_batched_tokens": 64},
    "v1": {"scheduler": "vllm-v1", "engine": "vllm-v1"},
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_named_case_is_the_same_step_by_step(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    s = Scenario(method="ar", requests=60, m=6, output_len=40, seed=4, engine="roofline")
    _both(s.replace(**CASES[name]), monkeypatch)


def test_a_stretch_cut_short_by_its_size_cap_goes_on_as_another(monkeypatch: pytest.MonkeyPatch) -> None:
    s = Scenario(method="ar", requests=60, m=6, output_len=40, seed=4, engine="roofline", rate=30.0)
    whole = run_everything(s)
    with monkeypatch.context() as patch:
        patch.setattr(quiet, "STRETCH_CELLS", 18)   # three steps of six requests a stretch
        assert_same(whole, run_everything(s))


@st.composite
def ar_scenarios(draw: st.DrawFn) -> Scenario:
    output_len = draw(st.integers(1, 80))
    chunked = draw(st.booleans())
    return Scenario(
        method="ar", engine=draw(st.sampled_from(["roofline", "vllm-0.9.2-v0-eager"])),
        m=draw(st.integers(1, 12)), requests=draw(st.integers(1, 60)), n=draw(st.sampled_from([1, 1, 2])),
        output_len=output_len, max_model_len=256, prompt_len=draw(st.integers(1, 256 - output_len)),
        rate=draw(st.one_of(st.none(), st.floats(0.5, 300.0))),
        abort_fraction=draw(st.sampled_from([0.0, 0.3])), abort_window_s=draw(st.sampled_from([0.05, 2.0])),
        preemption_mode=draw(st.sampled_from(["recompute", "swap"])),
        enable_chunked_prefill=chunked, max_num_batched_tokens=draw(st.sampled_from([64, 2048])) if chunked
        else 2048,
        num_gpu_blocks_override=draw(st.one_of(st.none(), st.integers(18, 200))),
        seed=draw(st.integers(0, 2**16)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(s=ar_scenarios())
def test_any_ar_scenario_is_the_same_step_by_step(s: Scenario, monkeypatch: pytest.MonkeyPatch) -> None:
    _both(s, monkeypatch)


def test_stretches_carry_most_of_the_default_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default AR run (the speed benchmark's) spends nearly all its steps in quiet stretches."""
    ran: list[int] = []
    quiet = AutoRegressive.quiet_steps

    def counted(self: AutoRegressive, plan: object) -> int:
        ran.append(quiet(self, plan))
        return ran[-1]

    monkeypatch.setattr(AutoRegressive, "quiet_steps", counted)
    r = simulate(Scenario(method="ar", requests=200))
    steps = r.summary["decode_steps"] + r.summary["prefill_steps"]
    assert sum(ran) > 0.9 * steps
    assert sum(ran) == sum(1 for _ in r.steps["start_s"]) - sum(1 for q in ran if q == 0)


def test_progress_is_still_reported_through_stretches() -> None:
    seen: list[float] = []
    simulate(Scenario(method="ar", requests=200), progress=seen.append)
    assert len(seen) > 3 and seen == sorted(seen) and seen[-1] == 1.0


@settings(max_examples=100, deadline=None)
@given(blocks=st.integers(1, 60), size=st.sampled_from([1, 4, 16]), lookahead=st.integers(0, 3),
       lengths=st.lists(st.integers(0, 40), min_size=1, max_size=6), plans=st.integers(1, 30))
def test_ahead_is_ensure_plan_after_plan(blocks: int, size: int, lookahead: int, lengths: list[int],
                                         plans: int) -> None:
    ids = np.arange(len(lengths))
    cached = np.array(lengths, dtype=np.int64)
    kv = KVPools({"verifier": blocks}, size, len(lengths))
    if not kv.ensure(ids, cached, lookahead):
        return   # the first plan already does not fit: the scheduler preempts, no stretch starts
    held, used = kv.ahead(ids, cached + 1, plans, lookahead)
    replay = KVPools({"verifier": blocks}, size, len(lengths))
    replay.ensure(ids, cached, lookahead)
    for i in range(plans):
        if not replay.ensure(ids, cached + 1 + i, lookahead):
            assert len(used) == i   # cut before the first plan ensure refuses
            break
        assert held[i].tolist() == replay.held[ids].tolist() and used[i] == replay.used
    else:
        assert len(used) == plans
    if used:
        kv.settle(ids, held[-1], used[-1], cached + len(used))
        assert kv.used == replay.used and kv.peak == replay.peak and kv.held.tolist() == replay.held.tolist()
        assert kv.written.tolist() == replay.written.tolist()


def test_the_scheduler_plans_a_stretch_and_ar_prices_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stretch is planned by sim/quiet.py from the scheduler's first plan: it ends before the
    step that would end a request, and its later plans are the scheduler's decode steps over
    the same requests."""
    from psdsim.sim.methods import ar

    stretches = []
    planned = quiet.plan_stretch

    def recorded(sched, plan, lookahead):
        stretch = planned(sched, plan, lookahead)
        if stretch is not None:
            left = sched.table.final_len[stretch.slots] - stretch.lengths
            assert 2 <= stretch.steps <= left.min() - 1 or stretch.steps == len(stretch.used) + 1
            stretches.append(stretch)
        return stretch

    monkeypatch.setattr(ar, "plan_stretch", recorded)
    simulate(Scenario(method="ar", requests=30, m=6, output_len=40, seed=4, engine="roofline"))
    assert stretches
    later = stretches[0].plan(1, 0.0)
    assert later is not None and later.decode is stretches[0].slots
    assert later.kv_blocks == stretches[0].used[0]
