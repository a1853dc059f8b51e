"""A rate the checks take must give a run whose figures are printed: a `rate` (or a plan's
rate_min) at the slowest that is taken once made Poisson arrivals whose random last arrival,
plus serving it, outlasted the clock's span, and the run was refused only at its summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from psdsim.sim.errors import ScenarioError
from psdsim.sim.run import simulate
from psdsim.sim.scenario import MAX_SPAN_S, Scenario, validate
from psdsim.sim.scenario_values import arrival_span_s, least_rate
from psdsim.studies.plan import load_plan


@pytest.mark.parametrize("requests", [1, 30, 200])
def test_a_run_at_the_slowest_rate_taken_is_summarised(requests):
    rate = float(least_rate(requests))
    for seed in range(4):
        s = Scenario(requests=requests, rate=rate, seed=seed, output_len=16)
        validate(s)
        summary = simulate(s).summary
        assert 0 < summary["makespan_s"] <= MAX_SPAN_S


def test_a_plans_slowest_rate_runs_to_a_summary(tmp_path: Path):
    plan = tmp_path / "p.toml"
    plan.write_text(f"[base]\nrequests = 30\noutput_len = 16\n[slo]\nlatency_p99_ms = 5\n"
                    f"[search]\nrate_min = {least_rate(30)}\n")
    spec = load_plan(plan)
    for seed in range(4):
        assert simulate(spec.base.replace(rate=spec.rate_min, seed=seed)).summary["makespan_s"] <= MAX_SPAN_S


def test_a_rate_just_below_the_slowest_is_refused_naming_rate():
    with pytest.raises(ScenarioError, match=r"^rate: 30 requests .* fix: raise rate to at least") as err:
        validate(Scenario(requests=30, rate=float(least_rate(30)) * 0.99))
    assert err.value.field == "rate"


@pytest.mark.parametrize("requests", [1, 30, 10**4, 10**7])
def test_the_span_bounds_the_last_arrival_of_poisson_draws(requests):
    """The bound holds with room on draws (a sum of `requests` exponential gaps of mean 1)."""
    import numpy as np

    g = np.random.default_rng(0)
    draws = 2000 if requests < 10**6 else 3
    last = [g.standard_gamma(requests) for _ in range(draws)]
    assert max(last) < arrival_span_s(requests, 1.0)
    assert arrival_span_s(requests, 1.0) < requests + 40 * requests**0.5 + 40   # not absurdly loose
