"""The coverage benchmark's reading of repeated validations (benchmarks/interval_coverage.py).

Why: a validation point counted as the range its runs measured must take every run's value, the
stored run's included, and the run-by-run check must tell a point that misses the same way in
every run (the model's gap) from misses that move between runs (the machine's noise)."""

from __future__ import annotations

import sys

from tests.helpers import paths

sys.path.insert(0, str(paths.ROOT / "benchmarks"))

from interval_coverage import Covered, over_runs, repeated_measurements, run_by_run, side

ROWS = {("ar", "tok"): Covered("ar tok", (100.0, 100.0), 110.0, 120.0, 130.0, "in"),
        ("sd", "tok"): Covered("sd tok", (120.0, 120.0), 110.0, 120.0, 130.0, "out")}
REPEATS = [{("ar", "tok"): 105.0, ("sd", "tok"): 140.0}, {("ar", "tok"): 90.0, ("sd", "tok"): 125.0}]


def test_a_point_over_its_runs_is_their_range() -> None:
    ranged = {c.what: c for c in over_runs(ROWS, REPEATS)}
    assert ranged["ar tok over 3 runs"].measured == (90.0, 105.0)
    assert not ranged["ar tok over 3 runs"].inside          # every run below 110
    assert ranged["sd tok over 3 runs"].measured == (120.0, 140.0)
    assert ranged["sd tok over 3 runs"].inside


def test_side_of_the_interval() -> None:
    c = ROWS["ar", "tok"]
    assert (side(c, 100.0), side(c, 110.0), side(c, 130.0), side(c, 131.0)) == (-1, 0, 0, 1)


def test_run_by_run_names_only_the_steady_miss() -> None:
    # ar misses below in all three runs; sd is inside, then above, then inside: noise
    (line,) = run_by_run(ROWS, REPEATS)
    assert "1 / 2, 0 / 2, 1 / 2 inside" in line
    assert line.endswith("every run: ar tok (below).")


def test_the_recorded_repeats_hold_every_point_of_the_stored_validation() -> None:
    repeats = repeated_measurements()
    assert len(repeats) >= 2
    runs = {"ar", "sd_k1", "sd-2proc_k1", "psd_k1", "pearl_k1", "sd_k2", "sd-2proc_k2", "psd_k2", "pearl_k2"}
    for rep in repeats:
        assert {run for run, _ in rep} == runs
        assert all(value > 0 for value in rep.values())
