"""Properties that must hold for every scenario: hypothesis searches for counterexamples."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from psdsim.sim.scenario import Scenario
from tests.helpers.invariants import check_invariants
from tests.helpers.scenarios import scenarios


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_invariants_hold(s: Scenario):
    check_invariants(s)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(["adaptive"]))
def test_invariants_hold_while_the_adaptive_mode_switches(s: Scenario):
    """The adaptive mode has more paths than one run takes (drains, splits, AR steps): more draws."""
    check_invariants(s)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(["decoupled"]))
def test_invariants_hold_over_a_decoupled_service(s: Scenario):
    """V replicas side by side sharing drafters and a link: more draws of their interplay."""
    check_invariants(s)
