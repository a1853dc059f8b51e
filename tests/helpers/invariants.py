"""The invariants every run must keep, checked on one run: no request lost or finished twice,
tokens conserved, KV blocks never over-allocated or leaked, batch sizes adding up, time monotone."""

from __future__ import annotations

import json

import numpy as np

from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario


def check_invariants(s: Scenario) -> None:
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
    if s.method == "decoupled":   # b branches a verified request; a miss wastes them all
        prepared, verified = steps["drafts_prepared"], steps["verified"]
        assert (prepared == verified * s.service_branches).all()
        assert (steps["drafts_missed"] <= verified).all()
        assert (steps["drafts_wasted"] <= prepared).all() and (steps["drafts_wasted"] >= 0).all()
        assert (steps["drafter_queue_s"] >= 0).all()
    # Pre-drafts thrown away are at most those drafted, and only the pre-drafting tail has any.
    wasted = steps["pre_drafts_wasted"]
    assert (wasted <= steps["drafted"] * width).all() and (wasted >= 0).all()
    assert wasted.sum() == 0 or s.tail != "sd"
    # Simulated time never goes backwards and an engine's steps do not overlap (a decoupled
    # service's replicas are engines side by side).
    assert (steps["end_s"] >= steps["start_s"]).all()
    for engine in np.unique(steps["replica"]) if "replica" in steps else [None]:
        mine = steps["replica"] == engine if engine is not None else slice(None)
        assert (steps["start_s"][mine][1:] >= steps["end_s"][mine][:-1]).all()
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
