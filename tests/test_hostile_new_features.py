"""Hostile inputs to the newer features (adaptive, the pre-drafted tail, transfers, kv_sizing,
balance_by, --intervals, validate --bench, the calibrate trace formats): each a refusal in one
line naming its field, or a run that says what it did with an input it did not use."""

from __future__ import annotations

from psdsim.sim.scenario import Scenario
from psdsim.sim.scenario_caveats import warnings


def test_adaptive_fields_set_for_another_method_say_they_are_not_read():
    """tail= and balance_by= for a method that cannot use them are refused; the adaptive fields
    were dropped in silence, so `--set adaptive_margin=0.5` on sd read as an adaptive run."""
    for method in ("sd", "psd", "ar"):
        notes = warnings(Scenario(method=method, adaptive_margin=0.5, adaptive_modes="psd,sd"))
        assert any(n.startswith("ignored: adaptive_modes and adaptive_margin") and method in n for n in notes)
    assert not any("adaptive_" in n for n in warnings(Scenario(method="adaptive", adaptive_margin=0.5)))
    assert not any("adaptive_" in n for n in warnings(Scenario(method="sd")))
