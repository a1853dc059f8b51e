"""The stored reference-engine validation's command, run again: how far one run of it moves.

    python benchmarks/validate_repeats.py [--runs 4] [--out DIR]

tests/data/validate_small is one run of `psdsim validate` (6 requests of 12 tokens, k = 1, 2,
m = 2: tests/engine/test_validate_prediction.py's command) with one repeat per configuration, so it
cannot say how much of its error is the machine's. This runs the same command `--runs` times
(each into DIR/runI; a run whose measured.json is already there is kept, so an interrupted
measurement resumes) and writes each run's measured throughput and p50 latency per
configuration, with its load average per CPU, to docs/measurements/validate_small_repeats.json:
benchmarks/interval_coverage.py reads it as the spread of the measurement itself.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from recording import MEASUREMENTS, commit

from psdsim.engine.validate.report import metric
from tests.helpers.engines import ARGS

RECORD = MEASUREMENTS / "validate_small_repeats.json"
METRICS = ("throughput_tok_s", "latency_ms.p50")


def run_once(out: Path) -> None:
    """One whole validation into `out`, unless its engine runs are already there. Only the engine's
    measurements are read: a run whose prediction step then fails (a profile fitted to a few
    noisy passes can price a term at zero, which `psdsim validate` refuses) still measured."""
    if (out / "measured.json").exists():
        return
    subprocess.run([sys.executable, "-m", "psdsim", *ARGS, "--out", str(out)], check=False,
                   stdout=subprocess.DEVNULL)


def measured(out: Path) -> dict:
    """One run's measured metrics per configuration and the load it ran under."""
    report = out / "validate.json"
    load = None
    if report.exists():
        load = json.loads(report.read_text(encoding="utf-8"))["noise"]["load_per_cpu"]
    summaries = json.loads((out / "measured.json").read_text(encoding="utf-8"))["summaries"]
    return {"load_per_cpu": load, "predicted": report.exists(),
            "runs": {run: {key: metric(s, key) for key in METRICS} for run, s in summaries.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--out", type=Path, default=Path("results/validate-repeats"))
    args = ap.parse_args()
    runs = []
    for i in range(args.runs):
        run_once(args.out / f"run{i}")
        runs.append(measured(args.out / f"run{i}"))
        load = runs[-1]["load_per_cpu"]
        print(f"run {i}: load {'unknown' if load is None else f'{load:.1f}'} per CPU; "
              + ", ".join(f"{r} {m['throughput_tok_s']:.0f} tok/s" for r, m in runs[-1]["runs"].items()))
    doc = {"command": f"psdsim {' '.join(ARGS)} --out DIR", "measured_by": "benchmarks/validate_repeats.py",
           "recorded": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
           "commit": commit(), "repeats": runs}
    RECORD.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"recorded: {RECORD}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
