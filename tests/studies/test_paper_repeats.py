"""`psdsim paper` averages each point over repeats as the paper's notebook does."""

from __future__ import annotations

import numpy as np
import pytest

from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario
from psdsim.studies.paper import PAPER_REPEATS, run_grid


def test_a_point_is_the_mean_of_its_repeats_with_the_population_spread():
    """benchmarks/trace/analyze_plots.ipynb (MineDraft): per k and trim, `avg_*` = np.mean and
    `std_*` = np.std over the measured (non-warm-up) runs."""
    runs = [Scenario(method=m, requests=12, m=4, output_len=16, seed=5) for m in ("sd", "psd")]
    rows = run_grid(runs, repeats=3)
    assert PAPER_REPEATS == 3
    for s, row in zip(runs, rows, strict=True):
        one = [simulate(s.replace(seed=5 + i)).summary for i in range(3)]
        for key in ("throughput_tok_s", "e2el_ms", "vsr"):
            values = [summary[key] for summary in one]
            assert row[key] == pytest.approx(np.mean(values), rel=1e-12)
            assert row[f"{key}_std"] == pytest.approx(np.std(values), rel=1e-12)
        assert row["repeats"] == 3 and row["method"] == s.method
    assert rows[0]["throughput_tok_s_std"] > 0  # the seeds differ


def test_one_repeat_is_the_plain_run():
    s = Scenario(method="psd", requests=12, m=4, output_len=16, seed=2)
    row = run_grid([s], repeats=1)[0]
    assert row["throughput_tok_s"] == simulate(s).summary["throughput_tok_s"]
    assert row["throughput_tok_s_std"] == 0.0
