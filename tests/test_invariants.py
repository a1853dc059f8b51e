"""Properties that must hold for every scenario: hypothesis searches for counterexamples."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.run import simulate
from sim.scenario import Scenario

scenarios = st.builds(
    Scenario,
    method=st.sampled_from(["ar", "sd", "psd"]),
    k=st.integers(1, 8),
    m=st.integers(1, 8),
    requests=st.integers(1, 60),
    output_len=st.integers(1, 48),
    prompt_len=st.one_of(st.just(0), st.integers(1, 300)),
    dataset=st.sampled_from(["sharegpt", "arena", "spec-bench", "tough"]),
    acceptance=st.one_of(st.none(), st.floats(0.02, 0.98)),
    acceptance_spread=st.floats(0.5, 200.0),
    rate=st.one_of(st.none(), st.floats(0.05, 200.0)),
    link=st.sampled_from(["pcie4", "pcie5", "nvlink3", "nvlink4"]),
    gpu=st.sampled_from(["l40s", "h100-sxm", "h200", "a100-80g"]),
    seed=st.integers(0, 2**32 - 1),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_invariants_hold(s: Scenario):
    r = simulate(s)
    assert r.fits
    req, steps = r.requests, r.steps
    n = s.requests
    # Every request finishes exactly once, with all its tokens and nothing more.
    assert np.isfinite(req["finish_s"]).all()
    assert (req["generated"] == req["output_len"]).all()
    # Tokens are conserved: what the steps emitted is what the requests received.
    assert steps["generated"].sum() == req["output_len"].sum()
    assert (steps["accepted"] <= steps["proposed"]).all()
    decode = steps["kind"] == "decode"
    # A verification emits accepted + 1 tokens at most per request.
    assert (steps["generated"][decode] <= steps["verified"][decode] * (s.k + 1)).all()
    # Per request, lifecycle timestamps are ordered.
    assert (req["admitted_s"] >= req["arrival_s"]).all()
    assert (req["first_token_s"] >= req["admitted_s"]).all()
    assert (req["finish_s"] >= req["first_token_s"]).all()
    # Sub-batch sizes add up; PSD verifies one sub-batch and drafts the other.
    assert (steps["batch0"] + steps["batch1"] == steps["running"]).all()
    assert (steps["running"] <= (2 * s.m if s.method == "psd" else s.m)).all()
    if s.method == "psd":
        assert (steps["verified"][decode] + steps["drafted"][decode] == steps["running"][decode]).all()
    # Simulated time never goes backwards and steps do not overlap.
    assert (steps["end_s"] >= steps["start_s"]).all()
    assert (steps["start_s"][1:] >= steps["end_s"][:-1]).all()
    # The KV pool is never over-allocated and nothing leaks.
    assert r.kv is not None
    assert 0 <= r.kv.peak_blocks <= r.kv.total_blocks
    assert r.kv.in_use_at_end == 0
    # Fractions are fractions.
    sm = r.summary
    for key in ("vsr", "parallelization_rate", "comm_share", "link_share", "drafter_busy",
                "verifier_busy"):
        if sm[key] is not None:
            assert 0.0 <= sm[key] <= 1.0 + 1e-9, key
    assert sm["requests"] == n
    json.dumps(sm, allow_nan=False)  # no NaN or infinity leaks into the summary
    assert sm["decode_steps"] + sm["prefill_steps"] == len(steps["kind"])
