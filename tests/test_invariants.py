"""Properties that must hold for every scenario: hypothesis searches for counterexamples."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario

METHODS = ["ar", "sd", "psd", "sd-2m", "sd-5gpu", "pearl", "psd+tetris", "adaptive"]


@st.composite
def scenarios(draw: st.DrawFn, methods: list[str] = METHODS) -> Scenario:
    scheduler = draw(st.sampled_from(["vllm-v0", "vllm-v1"]))
    chunked = True if scheduler == "vllm-v1" else draw(st.booleans())
    output_len = draw(st.integers(1, 48))
    max_model_len = draw(st.sampled_from([128, 256, 2048]))
    prompt_cap = max_model_len - output_len
    method = draw(st.sampled_from(methods))
    ring = method == "psd" and draw(st.booleans())
    sub_batches = draw(st.integers(2, 4)) if ring else 2
    return Scenario(
        method=method,
        extra=draw(st.integers(1, 3)),
        sub_batches=sub_batches,
        drafters=draw(st.integers(1, sub_batches - 1)) if ring else 1,
        sampler_output=draw(st.sampled_from(["full", "compact"])),
        k=draw(st.integers(1, 8)),
        m=draw(st.integers(1, 8)),
        requests=draw(st.integers(1, 50)),
        n=draw(st.sampled_from([1, 1, 2, 3])),
        k_policy=draw(st.sampled_from(["fixed", "adaptive"]))
        if method in ("sd", "sd-2m", "sd-5gpu") or (method == "psd" and not ring) else "fixed",
        output_len=output_len,
        max_model_len=max_model_len,
        max_num_batched_tokens=draw(st.sampled_from([max_model_len, 2048, 4096])) if not chunked
        else draw(st.sampled_from([16, 64, 512, 2048])),
        prompt_len=draw(st.integers(1, min(300, prompt_cap))),
        acceptance=draw(st.one_of(st.none(), st.floats(0.02, 0.98))),
        acceptance_spread=draw(st.floats(0.5, 200.0)),
        rate=draw(st.one_of(st.none(), st.floats(0.05, 500.0))),  # high rates are bursts
        link=draw(st.sampled_from(["pcie4", "nvlink4"])),
        gpu=draw(st.sampled_from(["l40s", "h100-sxm"])),
        scheduler=scheduler,
        enable_chunked_prefill=chunked,
        preemption_mode=("recompute" if scheduler == "vllm-v1"
                         else draw(st.sampled_from(["recompute", "swap"]))),
        swap_space_gb=draw(st.sampled_from([0.0, 0.01, 4.0])),
        kv_patch=draw(st.sampled_from(["has_deferred", "default"] + ["intended"] * (method != "adaptive"))),
        adaptive_modes=draw(st.sampled_from(["psd,sd,ar", "psd,sd", "psd,ar", "psd"])),
        adaptive_margin=draw(st.sampled_from([0.0, 0.05, 0.5])),
        swap_in_batch=draw(st.sampled_from(["verified", "drafted"])),
        psd_prefill_chunks=draw(st.sampled_from(["verified-only", "every-pass"])),
        pearl_stale=(stale := draw(st.sampled_from(["rejected", "as-fresh", "rate"]))),
        pearl_stale_acceptance=draw(st.floats(0.0, 1.0)) if stale == "rate" else 0.0,
        rebalance=draw(st.booleans()),
        balance_by=(draw(st.sampled_from(["requests", "kv"])) if method in ("psd", "adaptive") and not ring
                    else "requests"),
        tail=draw(st.sampled_from(["sd", "pre-draft", "pre-draft-pearl"]))
        if method in ("psd", "psd+tetris") and not ring else "sd",
        abort_fraction=draw(st.sampled_from([0.0, 0.3])),
        # the model's error as --intervals draws it: passes priced longer or shorter
        verify_error=draw(st.one_of(st.none(), st.floats(0.5, 1.2))),
        draft_error=draw(st.one_of(st.none(), st.floats(0.7, 1.2))),
        abort_window_s=draw(st.sampled_from([0.05, 5.0])),
        # tiny pools force preemption; None keeps the GPU-sized pool
        num_gpu_blocks_override=draw(st.one_of(st.none(), st.integers(max_model_len // 16 + 2,
                                                                       max_model_len // 16 + 100))),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_invariants_hold(s: Scenario):
    _check_invariants(s)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(["adaptive"]))
def test_invariants_hold_while_the_adaptive_mode_switches(s: Scenario):
    """The adaptive mode has more paths than one run takes (drains, splits, AR steps): more draws."""
    _check_invariants(s)


def _check_invariants(s: Scenario) -> None:
    r = simulate(s)
    assert r.fits
    req, steps = r.requests, r.steps
    n = s.requests
    state = req["state"]
    # Every request ends exactly once: finished with all its tokens, aborted part-way (after
    # its first token, when its client cancels), or rejected (a prompt the pool can never hold).
    assert set(state) <= {"finished", "aborted", "rejected"}
    finished, aborted = state == "finished", state == "aborted"
    assert (req["generated"][finished] == req["output_len"][finished]).all()
    assert (req["generated"][aborted] < req["output_len"][aborted]).all()
    assert (req["generated"][aborted] >= 1).all()
    assert (req["generated"][state == "rejected"] == 0).all()
    assert np.isfinite(req["end_s"]).all() and np.isfinite(req["finish_s"][finished]).all()
    # Tokens are conserved: what the steps emitted is what the requests received.
    assert steps["generated"].sum() == req["generated"].sum()
    assert (steps["accepted"] <= steps["proposed"]).all()
    decode = steps["kind"] == "decode"
    width = s.k + (s.extra if s.method == "psd+tetris" else 0)  # drafts a request may have scored
    assert (steps["generated"][decode] <= steps["verified"][decode] * (width + 1)
            + steps["prompts_done"][decode]).all()
    # Per request, lifecycle timestamps are ordered.
    started = ~np.isnan(req["admitted_s"])
    assert (req["admitted_s"][started] >= req["arrival_s"][started]).all()
    got_token = ~np.isnan(req["first_token_s"])
    assert (req["first_token_s"][got_token] >= req["admitted_s"][got_token]).all()
    assert (req["finish_s"][finished] >= req["first_token_s"][finished]).all()
    # Batch sizes add up: decoding sub-batches plus prefilling requests make the running set.
    assert (steps["batch0"] + steps["batch1"] + steps["prefilling"] == steps["running"]).all()
    most_m = int(steps["m"].max()) if "m" in steps else s.m   # adaptive_m moves m between its bounds
    cap = {"psd": s.sub_batches * s.m, "psd+tetris": 2 * s.m, "sd-2m": 2 * s.m, "adaptive": 2 * most_m}
    assert (steps["running"] <= cap.get(s.method, s.m)).all()
    if s.batch_managed:
        # a step drafts the sub-batch it does not verify; pre-drafting the tail (one sub-batch
        # empty), it drafts the one it verifies; the adaptive mode's step that drains PSD's drafts
        # in flight (a switch drafting nothing) drafts neither, while the other sub-batch waits
        both = decode & ~(steps["switch"] & (steps["drafted"] == 0)) if "switch" in steps else decode
        b0, b1 = steps["batch0"][both], steps["batch1"][both]
        decoding = b0 + b1
        pre_drafted = (s.tail != "sd") & ((b0 == 0) | (b1 == 0))
        drafted = np.where(pre_drafted, steps["verified"][both], decoding - steps["verified"][both])
        assert (steps["drafted"][both] == drafted).all()
    if s.method == "adaptive":   # no draft is lost to a switch: PSD's last step before SD or AR drafts none
        modes, drafted_now = steps["mode"][decode], steps["drafted"][decode]
        leaving = (modes[:-1] == "psd") & (modes[1:] != "psd")
        assert (drafted_now[:-1][leaving] == 0).all()
    # Pre-drafts thrown away are at most those drafted, and only the pre-drafting tail has any.
    wasted = steps["pre_drafts_wasted"]
    assert (wasted <= steps["drafted"] * width).all() and (wasted >= 0).all()
    assert wasted.sum() == 0 or s.tail != "sd"
    # Simulated time never goes backwards and steps do not overlap.
    assert (steps["end_s"] >= steps["start_s"]).all()
    assert (steps["start_s"][1:] >= steps["end_s"][:-1]).all()
    # KV blocks are never over-allocated and none leak.
    assert r.kv is not None
    assert 0 <= r.kv.peak_blocks <= r.kv.total_blocks
    assert (steps["kv_blocks"] <= r.kv.total_blocks).all()
    assert r.kv.in_use_at_end == 0
    # Preempted requests come back and end like any other (checked above for every request).
    assert req["preemptions"].sum() == steps["preempted"].sum()
    # Fractions are fractions.
    sm = r.summary
    for key in ("vsr", "vsr_trim80", "vsr_trim70", "parallelization_rate", "comm_share", "link_share",
                "drafter_busy", "verifier_busy"):
        if sm[key] is not None:
            assert 0.0 <= sm[key] <= 1.0 + 1e-9, key
    assert sm["requests"] == n and sm["sequences"] == n * s.n == len(state)
    # A prompt's n samples share its prompt and arrival (SamplingParams.n fans it out).
    assert (req["prompt"] == np.arange(len(state)) // s.n).all()
    for column in ("prompt_len", "arrival_s", "output_len"):
        assert (req[column].reshape(-1, s.n) == req[column][::s.n, None]).all(), column
    assert sm["decode_steps"] + sm["mixed_steps"] + sm["prefill_steps"] == len(steps["kind"])
    # The paper's count (generated_num: accepted drafts + 1 per verified request, before the trim
    # at output_len) covers what steps that schedule no prompt kept; they compute no prompt.
    paper = decode & (steps["prefill_groups"] == 0)
    assert (steps["accepted"][paper] + steps["verified"][paper] >= steps["generated"][paper]).all()
    assert (steps["prefill_tokens"][steps["prefill_groups"] == 0] == 0).all()
    json.dumps(sm, allow_nan=False)  # no NaN or infinity leaks into the summary
