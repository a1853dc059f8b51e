"""Fit the model-error ranges of sim/model_error.py to the H200 passes, and hold each fit out.

    python benchmarks/model_error_fit.py [--draws 32]

For each kind of pass (target: verify and prefill rows; draft) and engine mode (CUDA graphs,
eager), the range is the 5th to 95th percentile of measured / predicted median over the passes
of docs/measurements/h200_passes.jsonl, each predicted as benchmarks/interval_coverage.py predicts
it without the model error (launch cost at its median). The fit over all the passes is the range
to declare; the held-out figure splits each cell's passes in two (alternate rows, in file order),
fits each half, and counts the other half's passes inside their 90% interval with that half's
range drawn as one more dimension: coverage on passes the range was not fitted to.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from interval_coverage import PassDraws, covered, pass_draws

from psdsim.sim.uncertainty import LEVEL, QUANTILES

Cell = tuple[str, str]   # (model-error field, engine mode)


def fit(passes: Sequence[PassDraws]) -> dict[Cell, tuple[float, float]]:
    """Each cell's range: the 5th and 95th percentiles of measured / predicted median, widened
    so that a uniform draw over it has them as its own 5th and 95th percentiles (a 90% interval
    of a uniform input spans the middle 90% of its range)."""
    cells: dict[Cell, list[float]] = {}
    for p in passes:
        cells.setdefault((p.field, p.mode), []).append(p.measured / float(np.median(p.values)))
    out = {}
    for cell, r in cells.items():
        low, high = (float(np.quantile(r, q)) for q in (QUANTILES[0], QUANTILES[2]))
        pad = (high - low) * QUANTILES[0] / LEVEL
        out[cell] = (low - pad, high + pad)
    return out


def held_out(draws: int) -> dict[str, tuple[int, int]]:
    """Per engine mode: passes inside their interval when each half's range comes from the other
    half, and the count."""
    plain = pass_draws(draws, launch_spread=False, error=None)
    seen: dict[Cell, int] = {}
    half = []
    for p in plain:
        cell = (p.field, p.mode)
        half.append(seen.get(cell, 0) % 2)
        seen[cell] = seen.get(cell, 0) + 1
    inside: dict[str, int] = {}
    for fold in (0, 1):
        ranges = fit([p for p, h in zip(plain, half, strict=True) if h != fold])
        scaled = pass_draws(draws, launch_spread=False, error=ranges)
        for p, h in zip(scaled, half, strict=True):
            if h == fold:
                inside[p.mode] = inside.get(p.mode, 0) + covered(p).inside
    return {mode: (n, sum(p.mode == mode for p in plain)) for mode, n in inside.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=32)
    args = ap.parse_args()
    ranges = fit(pass_draws(args.draws, launch_spread=False, error=None))
    print("| field | mode | low | high |\n|---|---|---|---|")
    for (field, mode), (low, high) in sorted(ranges.items()):
        print(f"| {field} | {mode} | {low:.3f} | {high:.3f} |")
    by_mode = held_out(args.draws)
    inside, total = (sum(counts[i] for counts in by_mode.values()) for i in (0, 1))
    modes = "; ".join(f"{mode} {n} / {count}" for mode, (n, count) in by_mode.items())
    print(f"\nheld out (each half's range fitted on the other half): {inside} / {total} passes covered "
          f"({inside / total:.0%}; {modes})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
