"""benchmarks/step_kinds.py counts every step of a run once, whatever ran it (a method's step, a
quiet stretch, a stretch that closes a step for a client's cancel), and leaves the simulator as
it found it: its table is what the speed decisions rest on (docs/measurements/step_kinds.md)."""

from __future__ import annotations

import pytest

from psdsim.sim.methods.ar import AutoRegressive
from psdsim.sim.methods.common import EngineMethod
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario
from psdsim.sim.scheduler import Scheduler
from tests.helpers import paths

BENCHMARKS = paths.ROOT / "benchmarks"


@pytest.mark.parametrize("method", ["psd", "sd", "ar"])
def test_every_step_is_counted_once(method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import step_kinds

    s = Scenario(method=method, requests=40, m=4, output_len=30, seed=3, engine="roofline", rate=30.0,
                 abort_fraction=0.3, abort_window_s=0.3)
    originals = (Scheduler.plan, Scheduler.close_step, AutoRegressive.quiet_steps, EngineMethod.quiet_steps)
    tally: dict[str, list[float]] = {}
    with step_kinds.timed_steps(tally):
        r = simulate(s)
    assert (Scheduler.plan, Scheduler.close_step, AutoRegressive.quiet_steps,
            EngineMethod.quiet_steps) == originals
    assert sum(n for n, _ in tally.values()) == r.summary["decode_steps"] + r.summary["prefill_steps"]
    assert all(t > 0 for _, t in tally.values())
    ended = sum(n for kind, (n, _) in tally.items() if kind.endswith(", ends"))
    assert 0 < ended <= s.requests
    if method == "ar":
        assert tally["quiet stretch"][0] > 0
