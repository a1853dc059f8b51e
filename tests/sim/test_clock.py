"""The plain clock (sim/clock.py) runs what SimPy would: a run priced in advance gives the same
results, bit for bit, on either (named cases, and any scenario hypothesis draws, AR's quiet
stretches, which run only on the clock, included), and the ring, whose drafter workers need
events, keeps SimPy."""

from __future__ import annotations

import numpy as np
import pytest
import simpy
from hypothesis import HealthCheck, assume, given, settings

from psdsim.sim import run as run_module
from psdsim.sim.clock import Clock, run_clocked
from psdsim.sim.devices import wait_until
from psdsim.sim.methods import method_class
from psdsim.sim.scenario import Scenario
from tests.helpers.scenarios import assert_same, run_everything, scenarios


def test_a_timeout_lands_where_simpys_lands() -> None:
    clock, env = Clock(), simpy.Environment()
    delays = [0.1, 1e-9, 0.3, 2.5e-7, 0.0, 7.0]

    def waits(e: simpy.Environment | Clock):
        for d in delays:
            yield e.timeout(d)

    run_clocked(waits(clock))
    env.run(until=env.process(waits(env)))
    assert clock.now == env.now and type(clock.now) is type(env.now)
    assert Clock().now == 0 and type(Clock().now) is int   # SimPy's initial time, as outputs show it


def test_wait_until_reaches_the_very_float_on_the_clock() -> None:
    clock = Clock()
    rng = np.random.default_rng(5)
    for at in np.cumsum(rng.exponential(0.01, 200)).tolist():
        run_clocked(wait_until(clock, at))
        assert clock.now == at


@pytest.mark.parametrize("changes", [
    {"method": "psd"}, {"method": "sd"}, {"method": "ar"}, {"method": "pearl"},
    {"method": "psd", "engine": "vllm-0.9.2-v0-eager", "rate": 20.0, "abort_fraction": 0.2,
     "abort_window_s": 1.0},
    {"method": "psd", "num_gpu_blocks_override": 130, "prompt_len": 256, "enable_chunked_prefill": True,
     "max_num_batched_tokens": 96},   # one preemption
])
def test_a_run_priced_in_advance_is_the_same_on_simpy(monkeypatch: pytest.MonkeyPatch, changes: dict) -> None:
    s = Scenario(requests=40, m=4, k=3, output_len=24, seed=2, engine="roofline").replace(**changes)
    kind = method_class(s)
    assert not kind.needs_events(s)
    clocked = run_module.simulate(s, timeline=True)
    monkeypatch.setattr(kind, "needs_events", staticmethod(lambda _: True))
    evented = run_module.simulate(s, timeline=True)
    assert clocked.summary == evented.summary
    for name in clocked.steps:
        np.testing.assert_array_equal(clocked.steps[name], evented.steps[name])
    for name in clocked.requests:
        np.testing.assert_array_equal(clocked.requests[name], evented.requests[name])
    assert clocked.timeline is not None and evented.timeline is not None
    assert clocked.timeline.slices == evented.timeline.slices


def test_the_ring_keeps_simpy() -> None:
    ring = Scenario(sub_batches=3, drafters=2)
    assert method_class(ring).needs_events(ring)
    assert not method_class(Scenario()).needs_events(Scenario())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(s=scenarios())
def test_any_scenario_priced_in_advance_is_the_same_on_simpy(s: Scenario,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    kind = method_class(s)
    assume(not kind.needs_events(s))
    clocked = run_everything(s)
    with monkeypatch.context() as patch:
        patch.setattr(kind, "needs_events", staticmethod(lambda _: True))
        assert_same(clocked, run_everything(s))


def test_the_clock_refuses_to_wait_for_an_event_it_cannot_see() -> None:
    """A booked method that yields an event must fail, not run on as if it had waited."""
    clock = Clock()

    def waits_for_an_event(e: Clock):
        yield e.timeout(1.0)
        yield simpy.Environment().event()

    with pytest.raises(RuntimeError, match="only SimPy can wait for"):
        run_clocked(waits_for_an_event(clock))
    assert clock.now == 1.0
