"""The simulator in its idealised mode agrees with the closed-form theory."""

from __future__ import annotations

import math

import pytest

from psdsim.sim.costs import ConstantCost
from psdsim.sim.errors import ScenarioError
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario
from psdsim.studies.theory_bridge import bridge, scenario_tail
from psdsim.theory.model import FrontierModel, best_k

# One acceptance rate for every request: the frontier is exactly exponential in t = k t_tok.
IDEAL = Scenario(m=16, requests=800, output_len=256, prompt_len=16, acceptance=0.7,
                 acceptance_spread=1e9, seed=3)
T_TOKEN, V = 3.0, 10.0


def test_idealised_mode_matches_theory_within_one_percent():
    rep = bridge(IDEAL, [1, 2, 3, 4, 5], cost=ConstantCost(0.0, V, draft_per_token_s=T_TOKEN))
    assert rep.fit.alpha == pytest.approx(math.log(1 / 0.7) / T_TOKEN, rel=0.02)
    assert rep.fit.scale == pytest.approx(0.7 / 0.3, rel=0.02)
    assert rep.t_token == pytest.approx(T_TOKEN)
    assert rep.simulated_best_k == rep.predicted_best_k == rep.closed_form_best_k == {"sd": 2, "psd": 3}
    assert abs(rep.ratio_error) < 0.01


def test_with_communication_matches_the_extended_theory_within_two_percent():
    c = 2.0  # charged as c/2 per message: one message out, one back, the output at the pass's end
    rep = bridge(IDEAL.replace(transfers="one-message"), [1, 2, 3, 4, 5],
                 cost=ConstantCost(0.0, V, draft_per_token_s=T_TOKEN, comm_s=c / 2))
    assert rep.model.comm == pytest.approx(c)
    assert rep.simulated_best_k == rep.predicted_best_k == {"sd": 2, "psd": 4}
    assert abs(rep.ratio_error) < 0.02


def test_an_output_received_after_drafting_is_serial_in_the_theory():
    """MineDraft's per-tensor transfers: the inputs' 9 broadcasts overlap the drafting (c), the
    output's 5 sends cross once the driver has drafted, outside the overlap (in s_psd), so PSD's
    step is max(t, V + c) + 5 c_msg + s: the extended theory still picks the simulator's best k
    and its PSD/SD ratio within 2%."""
    message = 0.5
    rep = bridge(IDEAL, [1, 2, 3, 4, 5],
                 cost=ConstantCost(0.0, V, draft_per_token_s=T_TOKEN, comm_s=message))
    assert rep.model.comm == pytest.approx(9 * message)
    assert rep.model.serial_psd == pytest.approx(5 * message)
    assert rep.simulated_best_k == rep.predicted_best_k == rep.closed_form_best_k
    assert abs(rep.ratio_error) < 0.02


def test_scenario_tail_needs_an_offline_pool():
    with pytest.raises(ScenarioError):
        scenario_tail(Scenario(rate=2.0))
    assert 0.9 < scenario_tail(Scenario(requests=64)).parallelization_rate < 1.0


def test_drafter_side_cost_c_d_matches_the_simulator():
    """c_d, the drafter's fixed cost per drafting (max(t + c_d, V + c) in theory.model), is what the
    simulator's PSD pays for a draft pass of d0 + k t_tok: each k's simulated throughput is the
    model's m x tokens / step within 1%, and c_d moves the best k from 3 to 2, in both."""
    d0 = 4.0
    model = FrontierModel.from_acceptance(0.7, T_TOKEN, V, comm_drafter=d0)
    assert best_k(FrontierModel.from_acceptance(0.7, T_TOKEN, V), T_TOKEN, "psd", k_max=4).k == 3
    assert best_k(model, T_TOKEN, "psd", k_max=4).k == 2
    cost = ConstantCost(d0, V, draft_per_token_s=T_TOKEN)
    simulated = {}
    for k in (1, 2, 3, 4):
        summary = simulate(IDEAL.replace(method="psd", k=k), cost=cost).summary
        simulated[k] = summary["throughput_tok_s_trim80"]
        predicted = IDEAL.m * float(model.tokens(k * T_TOKEN)) / float(model.step_psd(k * T_TOKEN))
        assert simulated[k] == pytest.approx(predicted, rel=0.01), k
    assert max(simulated, key=simulated.get) == 2
