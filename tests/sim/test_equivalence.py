"""The equivalence record: summaries of a fixed set of scenarios, recorded on a known commit, that a
refactor or a speed-up must reproduce bit for bit.

Why: the method layer, the hot path and the cost model are being restructured; every such change
promises "behaviour preserved unless a bug is named". This test holds it to that promise. Every
key recorded in tests/data/golden_summaries.json must come back identical (floats compared by
value, exactly); keys a later change adds to the summary are allowed. A change that moves a
summary on purpose (a named bug fix, a corrected default) regenerates the file with

    python -m tests.sim.test_equivalence --regenerate

and says in its commit message which cases moved and why.

The set covers every method, tight KV (recompute and swap), aborts with arrivals, chunked prefill,
rebalance, the vLLM V1 scheduler, adaptive k, the PSD ring, fan-out (n), another preset, and a
fixed-cost model with measured overlap contention and after-idle slowdowns, and the engine
execution model's two profiles (V0 eager, V1).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from psdsim.sim.run import simulate
from tests.helpers import paths
from tests.helpers.scenarios import cases

GOLDEN = paths.DATA / "golden_summaries.json"


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
        sys.exit("usage: python -m tests.sim.test_equivalence --regenerate")
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps({n: summary_of(n) for n in sorted(cases())}, indent=1, sort_keys=True)
                      + "\n", encoding="utf-8")
    print(f"wrote {GOLDEN}")
