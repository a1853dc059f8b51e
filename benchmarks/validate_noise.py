"""`psdsim validate` several times over: the prediction errors and how much they move between runs.

Runs the whole validation (engine runs, calibration on AR + SD, contention microbenchmark,
simulation, comparison) `--runs` times, each with `--repeats` engine runs per configuration, and
prints per method and k the error of throughput and p50 latency in every run, their mean and
their standard deviation. docs/measurements/validate_reference.md comes from

    python benchmarks/validate_noise.py --runs 3 --repeats 2 --out results/validate-noise --record

(`--record` writes the table there with date, commit and machine.)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from recording import add_record_flag, write

from psdsim.engine.reference.config import EngineConfig
from psdsim.engine.validate.reference import ValidateConfig, run_validate

KEYS = (("throughput_tok_s", "tok/s"), ("latency_ms.p50", "p50"), ("e2el_ms", "E2EL"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--k", default="1,3,5")
    p.add_argument("--m", type=int, default=4)
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--output-len", type=int, default=64)
    p.add_argument("--out", type=Path, default=Path("results/validate-noise"))
    add_record_flag(p)
    a = p.parse_args()
    ks = tuple(int(x) for x in a.k.split(","))
    engine = EngineConfig(m=a.m, requests=a.requests, output_len=a.output_len)
    errors: dict[tuple[str, str], list[float | None]] = {}
    for i in range(a.runs):
        began = time.perf_counter()
        cfg = ValidateConfig(engine, a.out / f"run{i}", ks, repeats=a.repeats)
        report = run_validate(cfg)
        c = report["contention"]
        print(f"run {i}: {time.perf_counter() - began:.0f} s; contention draft x{c['draft']:.3f} verify "
              f"x{c['verify']:.3f}; spread {report['acceptance']['spread']:g}", file=sys.stderr, flush=True)
        for row in report["rows"]:
            for key, _ in KEYS:
                errors.setdefault((row["run"], key), []).append(row["metrics"][key]["error"])
    lines = [f"{'run':<14}" + "".join(f"{label:>34}" for _, label in KEYS)]
    runs = list(dict.fromkeys(r for r, _ in errors))
    for run in runs:
        cells = []
        for key, _ in KEYS:
            v = [e for e in errors[(run, key)] if e is not None]
            if not v:
                cells.append(f"{'–':>34}")
                continue
            each = " ".join(f"{100 * e:+.1f}" for e in v)
            sd = statistics.stdev(v) if len(v) > 1 else 0.0
            cells.append(f"{each:>20} {100 * statistics.mean(v):+5.1f}±{100 * sd:4.1f}%")
        lines.append(f"{run:<14}" + "".join(cells))
    print("\n".join(lines))
    doc = {f"{run} {key}": errors[(run, key)] for run, key in errors}
    (a.out / "noise.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    if a.record:
        notes = (f"{a.runs} whole validations of the reference engine, {a.repeats} repeats each; m={a.m}, "
                 f"{a.requests} requests x {a.output_len} tokens; error = (predicted - measured) / measured "
                 "in each run, then mean ± sd.")
        path = write("validate_reference", "Validation against the reference engine", lines, notes)
        print(f"recorded: {path}")


if __name__ == "__main__":
    main()
