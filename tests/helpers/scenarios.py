"""Scenarios the tests share: small fast ones, hypothesis's strategy over every field that
matters, the fixed recorded cases of the equivalence record, and comparing two runs exactly."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st

from psdsim.sim.costs import ConstantCost
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario, load_scenario


def small(**changes) -> Scenario:
    """A small, fast, valid scenario (fixed prompts, short outputs)."""
    base = dict(requests=40, m=4, k=3, output_len=32, prompt_len=64, seed=1)
    base.update(changes)
    return Scenario(**base)


def decode_rows(steps: dict[str, np.ndarray]) -> np.ndarray:
    """The rows of a run's step table that are decode steps."""
    return np.flatnonzero(steps["kind"] == "decode")


# Pinned so that a change of a default (engine cost model, scheduling semantics) does not move the
# record: the record is about the simulator's mechanics. Add a pin here when a new field with a
# behaviour-changing default appears.
PINNED: dict[str, Any] = {"engine": "roofline"}


class _SlowedCost(ConstantCost):
    """Fixed step costs with measured-style slowdowns: both sides slow while they overlap, and
    work after idling pays a factor that grows with the idle time."""

    contention = (1.4, 1.2)

    def after_idle(self, side: str, idle_s: float) -> float:
        return 1.0 + min(idle_s, 0.01) * (20.0 if side == "verify" else 10.0)


def _slowed() -> ConstantCost:
    return _SlowedCost(0.004, 0.006, draft_per_token_s=0.0005, prefill_s=0.003, comm_s=1e-4,
                       reject_s=2e-4, overhead_s=5e-4)


def _base(**changes: Any) -> Scenario:
    fields = dict(requests=48, m=4, k=3, output_len=24, seed=3, name="golden", **PINNED)
    fields.update(changes)
    return Scenario(**fields)


def cases() -> dict[str, tuple[Scenario, Callable[[], Any] | None]]:
    """Every case: its scenario and, where it runs on a cost model of its own, that model."""
    out: dict[str, tuple[Scenario, Callable[[], Any] | None]] = {}
    for method in ("ar", "sd", "psd", "sd-2m", "sd-5gpu", "pearl", "psd+tetris"):
        out[method] = (_base(method=method, extra=1 if method == "psd+tetris" else 0), None)
    out["pearl-per-request"] = (_base(method="pearl", pearl_variant="per-request"), None)
    out["psd-tight-kv-recompute"] = (_base(num_gpu_blocks_override=130, requests=40), None)
    out["psd-tight-kv-swap"] = (_base(num_gpu_blocks_override=130, requests=40, preemption_mode="swap"), None)
    out["sd-tight-kv"] = (_base(method="sd", num_gpu_blocks_override=130, requests=40), None)
    out["psd-aborts-rate"] = (_base(rate=6.0, abort_fraction=0.3, abort_window_s=2.0), None)
    out["psd-chunked"] = (_base(enable_chunked_prefill=True, max_num_batched_tokens=128), None)
    out["sd-chunked"] = (_base(method="sd", enable_chunked_prefill=True, max_num_batched_tokens=128), None)
    out["psd-rebalance"] = (_base(rebalance=True, rate=8.0, abort_fraction=0.2, abort_window_s=1.0), None)
    out["psd-vllm-v1"] = (_base(scheduler="vllm-v1", rate=8.0), None)
    out["psd-adaptive"] = (_base(k_policy="adaptive", acceptance=0.8), None)
    out["sd-adaptive"] = (_base(method="sd", k_policy="adaptive", acceptance=0.3), None)
    out["ring-3x1"] = (_base(sub_batches=3, drafters=1), None)
    out["ring-3x2"] = (_base(sub_batches=3, drafters=2), None)
    out["psd-n2"] = (_base(n=2, requests=24), None)
    out["psd-nvlink"] = (_base(link="nvlink4", k=5), None)
    out["psd-overlap-prefill"] = (_base(overlap_draft_prefill=True), None)
    setting6 = load_scenario(overrides=[f"{k}={v}" for k, v in PINNED.items()], preset="setting6")
    out["setting6-psd"] = (setting6.replace(requests=32, output_len=24, seed=3), None)
    for method in ("psd", "pearl", "sd"):
        out[f"{method}-slowed"] = (_base(method=method, prompt_len=64), _slowed)
    out["ring-3x2-slowed"] = (_base(sub_batches=3, drafters=2, prompt_len=64), _slowed)
    out["ring-3x1-slowed"] = (_base(sub_batches=3, drafters=1, prompt_len=64), _slowed)
    # the engine execution model (sim/execution.py), each profile named rather than defaulted
    for method in ("psd", "sd", "ar", "pearl"):
        out[f"{method}-eager-engine"] = (_base(method=method, engine="vllm-0.9.2-v0-eager"), None)
    out["psd-vllm-v1-engine"] = (_base(scheduler="vllm-v1", engine="vllm-v1"), None)
    out["sd-vllm-v1-engine"] = (_base(method="sd", scheduler="vllm-v1", engine="vllm-v1"), None)
    return out


METHODS = ["ar", "sd", "psd", "sd-2m", "sd-5gpu", "pearl", "psd+tetris", "adaptive", "decoupled"]


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
        service_verifiers=draw(st.integers(1, 3)),
        service_drafters=draw(st.integers(1, 2)),
        service_branches=draw(st.integers(1, 2)),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


def run_everything(s: Scenario) -> tuple[str, dict, dict]:
    r = simulate(s)
    return json.dumps(r.summary, sort_keys=True, default=str), r.steps, r.requests


def assert_same(a: tuple[str, dict, dict], b: tuple[str, dict, dict]) -> None:
    assert a[0] == b[0]
    for table_a, table_b in ((a[1], b[1]), (a[2], b[2])):
        assert list(table_a) == list(table_b)
        for name in table_a:
            x, y = np.asarray(table_a[name]), np.asarray(table_b[name])
            assert x.dtype == y.dtype, name
            assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), name


def _reference_cell(value):
    if isinstance(value, (float, np.floating)):
        return "" if math.isnan(value) else repr(float(value))
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, np.integer):
        return int(value)
    return value


def reference_csv(columns) -> str:
    """The writer before the change: csv.writer, one row at a time."""
    names = list(columns)
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(names)
    for row in zip(*(columns[n].tolist() for n in names), strict=True):
        writer.writerow([_reference_cell(v) for v in row])
    return buf.getvalue()
