"""The model's own error (sim/model_error.py): absent, a run is the run it was; set, every target
or draft pass takes that many times as long; under --intervals it is drawn from its regime's
range (the engine mode's, or a fitted profile's narrower drift), seeded and deterministic."""

from __future__ import annotations

import numpy as np
import pytest

from psdsim.sim.costs import Chunks, ConstantCost
from psdsim.sim.errors import ScenarioError
from psdsim.sim.model_error import EAGER, ERROR_RANGES, GRAPHS, PROFILE, ModelError, with_model_error
from psdsim.sim.profile import FittedCost, unrecorded
from psdsim.sim.profile_reader import load_profile
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario
from psdsim.sim.uncertain_inputs import uncertain_inputs
from psdsim.sim.uncertainty import interval, make_draws, simulate_draw, unit_points
from tests.helpers.intervals import complete_profile

SMALL = Scenario(requests=24, output_len=16, m=4, prompt_len=32)


def _ranges(s: Scenario, methods=("psd",)) -> dict[str, tuple[float, float]]:
    return {i.name: (i.low, i.high) for i in uncertain_inputs(s, methods) if i.name.endswith("_error")}


def _range(field: str, regime: str) -> tuple[float, float]:
    r = ERROR_RANGES[field, regime]
    return r.low, r.high


def test_each_pass_kind_s_error_is_drawn_from_its_engine_mode_s_range() -> None:
    assert _ranges(SMALL) == {f: _range(f, EAGER) for f in ("verify_error", "draft_error")}
    graphs = SMALL.replace(engine="vllm-v1")
    assert _ranges(graphs) == {f: _range(f, GRAPHS) for f in ("verify_error", "draft_error")}
    assert _ranges(SMALL, ("ar",)) == {"verify_error": _range("verify_error", EAGER)}   # AR drafts nothing
    assert _ranges(SMALL.replace(verify_error=1.1)) == {"draft_error": _range("draft_error", EAGER)}


def test_a_profile_whose_terms_price_the_passes_shrinks_their_error_to_its_drift(tmp_path) -> None:
    profiled = SMALL.replace(profile=complete_profile(tmp_path / "p.json"))
    drift = {f: _range(f, PROFILE) for f in ("verify_error", "draft_error")}
    assert _ranges(profiled) == drift
    for field in drift:
        assert drift[field][1] - drift[field][0] < np.subtract(*_range(field, EAGER)[::-1])


def test_absent_factors_leave_the_cost_model_itself_and_the_run_unmoved() -> None:
    cost = ConstantCost(0.002, 0.01)
    assert with_model_error(cost, SMALL) is cost
    assert simulate(SMALL.replace(verify_error=1.0, draft_error=1.0)).summary == simulate(SMALL).summary


def test_a_factor_scales_its_own_kind_of_pass_and_nothing_else() -> None:
    inner = ConstantCost(0.002, 0.01, prefill_s=0.004, comm_s=1e-4, reject_s=3e-4, overhead_s=1e-3)
    cost = ModelError(inner, 1.5, 0.5)
    chunks = Chunks(tokens=8, pairs=36.0)
    assert cost.verify(4, 8, 100, chunks) == pytest.approx(1.5 * inner.verify(4, 8, 100, chunks))
    assert cost.draft(4, 3, 100) == pytest.approx(0.5 * inner.draft(4, 3, 100))
    assert (cost.comm(10), cost.broadcast(10), cost.reject(5), cost.framework(4, 4), cost.overhead) == (
        inner.comm(10), inner.broadcast(10), inner.reject(5), inner.framework(4, 4), inner.overhead)


def test_a_factor_out_of_bounds_is_refused_by_name() -> None:
    with pytest.raises(ScenarioError, match="verify_error"):
        simulate(SMALL.replace(verify_error=0.0))


def test_the_draws_of_the_error_are_seeded_and_deterministic() -> None:
    inputs = uncertain_inputs(SMALL, ["psd"])

    def drawn(seed: int) -> list[float]:
        s = SMALL.replace(seed=seed)
        points = unit_points(s, 8, len(inputs))
        return [d.scenario.verify_error for d in make_draws(s, ["psd"], inputs, points)]

    assert drawn(1) == drawn(1) != drawn(2)
    low, high = _range("verify_error", EAGER)
    assert all(low <= v <= high for v in drawn(1))
    (draw, *_) = make_draws(SMALL, ["psd"], inputs, unit_points(SMALL, 2, len(inputs)))
    assert simulate_draw(draw) == simulate_draw(draw)


def test_a_pass_bound_run_s_interval_widens_by_the_factor_s_own_spread() -> None:
    """AR at a fixed verify time and nothing else priced: every step is one target pass, so each
    draw's throughput is the point's over its drawn factor, and the 90% interval over the draws
    spans the point's throughput over the 95th and 5th percentiles of a uniform draw of the range."""
    s = Scenario(method="ar", requests=8, output_len=8, m=4, prompt_len=16)
    cost = ConstantCost(0.0, 0.01)
    point = simulate(s, cost=cost).summary["throughput_tok_s"]
    (error,) = [i for i in uncertain_inputs(s, ["ar"]) if i.name == "verify_error"]
    draws = 200
    scenarios = [d.scenario for d in make_draws(s, ["ar"], [error], unit_points(s, draws, 1))]
    throughput = np.array([simulate(d, cost=cost).summary["throughput_tok_s"] for d in scenarios])
    factors = np.array([d.verify_error for d in scenarios])
    np.testing.assert_allclose(throughput, point / factors, rtol=1e-9)
    iv = interval(throughput)
    quantile = lambda q: error.low + q * (error.high - error.low)   # noqa: E731  (a uniform range's quantile)
    stratum = (error.high - error.low) / draws   # a Latin hypercube puts one draw in each
    assert point / iv.low == pytest.approx(quantile(0.95), abs=2 * stratum)
    assert point / iv.high == pytest.approx(quantile(0.05), abs=2 * stratum)
    assert iv.low < point < iv.high   # the range holds factors either side of 1


def test_a_fitted_profile_under_a_factor_still_records_and_warns_as_without(tmp_path) -> None:
    """The factor wraps the profile's cost: what-if pricing still turns its recording off, and the
    run keeps the profile's warnings (they read the profile itself, not the wrapper)."""
    profiled = SMALL.replace(profile=complete_profile(tmp_path / "p.json"))
    fitted = FittedCost(load_profile(profiled.profile), ConstantCost(0.002, 0.01))
    with unrecorded(ModelError(fitted, 1.1, 0.9)):
        assert not fitted.recording
    assert fitted.recording
    plain, scaled = simulate(profiled).summary, simulate(profiled.replace(verify_error=1.1)).summary
    assert any(w.startswith("profile:") for w in plain["warnings"])
    assert scaled["warnings"] == plain["warnings"]
    assert scaled["throughput_tok_s"] < plain["throughput_tok_s"]
