"""Fingerprints of a fixed set of scenarios: a hash of each one's summary, step table, request
columns and (in a second run with timelines on) its timeline, so that a change that promises
"results unchanged" can be held to it bit for bit against another commit.

tests/sim/test_equivalence.py compares summaries only, within the test suite; this compares every
output a run writes, for more scenarios (the equivalence cases, each again at 120 requests with
arrivals and aborts, and the default scenario under several settings), and is run by hand:

    python benchmarks/fingerprints.py --out /tmp/now.json              # record this tree's
    python benchmarks/fingerprints.py --against /tmp/base.json         # compare with a record

A record of another commit is made by running this file with that commit installed (a
`git worktree add /tmp/base COMMIT`, `pip install -e /tmp/base` in a venv of its own, then
`python benchmarks/fingerprints.py --out base.json` from /tmp/base, copying this file there when the
commit predates it). Exit code 1 when any fingerprint differs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _digest_columns(columns: Mapping[str, np.ndarray]) -> str:
    """A hash of named arrays: each name, dtype, shape and bytes (object arrays by their repr)."""
    h = hashlib.sha256()
    for name in sorted(columns):
        values = np.asarray(columns[name])
        h.update(f"{name}|{values.dtype.str}|{values.shape}|".encode())
        h.update(repr(values.tolist()).encode() if values.dtype == object else values.tobytes())
    return h.hexdigest()[:16]


def _digest_json(doc: Any) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, allow_nan=True).encode()).hexdigest()[:16]


def scenarios() -> Iterator[tuple[str, Any, Any]]:
    """(name, scenario, cost model factory or None) of every fingerprinted case."""
    sys.path.insert(0, str(ROOT))
    from psdsim.sim.scenario import load_scenario
    from tests.helpers.scenarios import cases

    for name, (scenario, cost) in sorted(cases().items()):
        yield name, scenario, cost
        busy = scenario.replace(requests=120, rate=30.0, abort_fraction=0.2, abort_window_s=1.0)
        yield f"{name}@120-arrivals-aborts", busy, cost
    default = {
        "default-psd": [], "default-sd": ["method=sd"], "default-ar": ["method=ar"],
        "default-roofline": ["engine=roofline"], "default-rate2": ["rate=2"],
        "default-tight-aborts-chunked": ["num_gpu_blocks_override=400", "abort_fraction=0.2",
                                         "abort_window_s=5", "rate=8", "enable_chunked_prefill=true",
                                         "max_num_batched_tokens=512"],
        "default-kv-intended": ["kv_patch=intended"],
        "default-swap": ["num_gpu_blocks_override=400", "preemption_mode=swap"],
    }
    for name, overrides in default.items():
        yield name, load_scenario(overrides=["requests=300", *overrides]), None


def fingerprints() -> dict[str, dict[str, str]]:
    from psdsim.sim.output.timeline import trace_document
    from psdsim.sim.run import simulate

    out: dict[str, dict[str, str]] = {}
    for name, scenario, cost in scenarios():
        plain = simulate(scenario, cost=cost() if cost else None)
        timed = simulate(scenario, cost=cost() if cost else None, timeline=True)
        out[name] = {
            "summary": _digest_json(plain.summary),
            "steps": _digest_columns(plain.steps),
            "requests": _digest_columns(plain.requests),
            "summary_with_timeline": _digest_json(timed.summary),
            "timeline": _digest_json(trace_document(timed)["traceEvents"]),
        }
        print(f"  {name}: {out[name]['summary']}", file=sys.stderr)
    return out


def compare(now: Mapping[str, Mapping[str, str]], base: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Every case and part whose fingerprint differs, or that one record lacks."""
    moved = [f"{name}: only in {'this tree' if name in now else 'the record'}"
             for name in sorted(set(now) ^ set(base))]
    for name in sorted(set(now) & set(base)):
        moved += [f"{name}: {part} {base[name].get(part)} -> {value}"
                  for part, value in now[name].items() if base[name].get(part) != value]
    return moved


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="write this tree's fingerprints to a JSON file")
    ap.add_argument("--against", type=Path, help="compare this tree's fingerprints with a recorded file")
    args = ap.parse_args()
    now = fingerprints()
    if args.out is not None:
        args.out.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    if args.against is not None:
        moved = compare(now, json.loads(args.against.read_text(encoding="utf-8")))
        cases = {m.split(":", 1)[0] for m in moved}
        print(f"{len(now)} cases; {len(moved)} fingerprints differ, in {len(cases)} cases"
              f"{': ' + ', '.join(sorted(cases)) if cases else ''}" + "".join(f"\n  {m}" for m in moved))
        return 1 if moved else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
