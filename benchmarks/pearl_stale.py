"""PEARL's stale drafts: how much the unpublished acceptance of a stale draft moves PEARL
(docs/minedraft-fidelity.md §6), between the lower bound (pearl_stale = rejected, the default) and
the upper one (as-fresh).

    python benchmarks/pearl_stale.py [--record]

Table 1: the setting2 scenario (the default, 200 requests) under the default engine, each row the
mean over seeds 1, 2, 3, with SD on the same seeds for reference. Table 2: PEARL's throughput over
SD's at m = 1, 4, 16 (tests/sim/test_methods.py's scenario: 20 m requests, 128 tokens, seed 4, the
roofline engine), the paper's measured trend being that PEARL falls as m grows and below SD at 16.
`--record` writes both to docs/measurements/pearl_stale.md with date, commit and machine.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
from recording import Lines, add_record_flag, write

from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario

SEEDS = (1, 2, 3)
RATES = (0.05, 0.1, 0.2, 0.3, 0.5)
MODELS: list[tuple[str, dict[str, Any]]] = [
    ("rejected (default)", dict(pearl_stale="rejected")),
    *[(f"rate {x:g}", dict(pearl_stale="rate", pearl_stale_acceptance=x)) for x in RATES],
    ("as-fresh", dict(pearl_stale="as-fresh")),
]


def _setting2(fields: dict[str, Any]) -> tuple[float, float]:
    """(throughput, VSR), each the mean over SEEDS."""
    runs = [simulate(Scenario(requests=200, seed=seed, **fields)).summary for seed in SEEDS]
    return float(np.mean([r["throughput_tok_s"] for r in runs])), float(np.mean([r["vsr"] for r in runs]))


def _trend(model: dict[str, Any]) -> list[float]:
    ratios = []
    for m in (1, 4, 16):
        s = Scenario(m=m, requests=20 * m, output_len=128, seed=4, engine="roofline")
        pearl = simulate(s.replace(method="pearl", **model)).summary["throughput_tok_s"]
        ratios.append(pearl / simulate(s.replace(method="sd")).summary["throughput_tok_s"])
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_record_flag(parser)
    args = parser.parse_args()
    out = Lines()
    sd = _setting2(dict(method="sd"))
    out(f"setting2, 200 requests, seeds {SEEDS[0]}-{SEEDS[-1]}: SD {sd[0]:.1f} tok/s, VSR {sd[1]:.3f}")
    out(f"{'stale model':<20}{'tok/s':>8}{'vs rejected':>13}{'vs SD':>9}{'VSR':>8}"
        f"{'PEARL/SD m=1':>14}{'m=4':>7}{'m=16':>7}")
    base = None
    for name, model in MODELS:
        throughput, vsr = _setting2(dict(method="pearl", **model))
        base = base or throughput
        r1, r4, r16 = _trend(model)
        out(f"{name:<20}{throughput:>8.1f}{throughput / base - 1:>+13.1%}{throughput / sd[0] - 1:>+9.1%}"
            f"{vsr:>8.3f}{r1:>14.3f}{r4:>7.3f}{r16:>7.3f}")
    notes = ("tok/s, VSR: setting2 (the default scenario, default engine), method = pearl, the mean over "
             "seeds 1-3. PEARL/SD m=1..16: throughput ratio on tests/sim/test_methods.py's scenario "
             "(roofline engine, seed 4); the paper measured PEARL falling as m grows and below SD at m = 16.")
    print(f"\n{notes}")
    if args.record:
        path = write("pearl_stale", "PEARL's stale drafts: the unpublished acceptance between its bounds",
                     out, notes)
        print(f"recorded: {path}")


if __name__ == "__main__":
    main()
