"""The equivalence record: summaries of a fixed set of scenarios, recorded on a known commit, that a
refactor or a speed-up must reproduce bit for bit.

Why: the method layer, the hot path and the cost model are being restructured; every such change
promises "behaviour preserved unless a bug is named". This test holds it to that promise. Every
key recorded in tests/data/golden_summaries.json must come back identical (floats compared by
value, exactly); keys a later change adds to the summary are allowed. A change that moves a
summary on purpose (a named bug fix, a corrected default) regenerates the file with

    python -m tests.test_equivalence --regenerate

and says in its commit message which cases moved and why.

The set covers every method, tight KV (recompute and swap), aborts with arrivals, chunked prefill,
rebalance, the vLLM V1 scheduler, adaptive k, the PSD ring, fan-out (n), another preset, and a
fixed-cost model with measured overlap contention and after-idle slowdowns, and the engine
execution model's two profiles (V0 eager, V1).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from psdsim.sim.costs import ConstantCost
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario, load_scenario

GOLDEN = Path(__file__).parent / "data" / "golden_summaries.json"
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


def summary_of(name: str) -> dict[str, Any]:
    scenario, cost = cases()[name]
    summary = simulate(scenario, cost=cost() if cost else None).summary
    return json.loads(json.dumps(summary, allow_nan=False))  # the form the record holds


def _record() -> dict[str, dict[str, Any]]:
    return json.loads(GOLDEN.read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(cases()))
def test_the_summary_is_the_recorded_one(name: str) -> None:
    recorded = _record()
    assert name in recorded, f"no record of {name!r}: regenerate (see the module docstring)"
    now = summary_of(name)
    moved = {key: (value, now.get(key, "<missing>")) for key, value in recorded[name].items()
             if now.get(key, "<missing>") != value}
    assert not moved, f"{name}: recorded vs now: {moved}"


def test_the_record_has_no_stale_cases() -> None:
    assert set(_record()) == set(cases())


if __name__ == "__main__":
    if sys.argv[1:] != ["--regenerate"]:
        sys.exit("usage: python -m tests.test_equivalence --regenerate")
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps({n: summary_of(n) for n in sorted(cases())}, indent=1, sort_keys=True)
                      + "\n", encoding="utf-8")
    print(f"wrote {GOLDEN}")
