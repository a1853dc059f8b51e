"""Same scenario + same seed => identical results, bit for bit."""

from __future__ import annotations

import json

import numpy as np
import pytest

from psdsim.sim.run import simulate
from tests.conftest import small


@pytest.mark.parametrize("method", ["ar", "sd", "psd"])
def test_same_seed_same_results(method):
    s = small(method=method, requests=60, prompt_len=0, rate=5.0)
    a, b = simulate(s), simulate(s)
    assert json.dumps(a.summary) == json.dumps(b.summary)
    for table_a, table_b in ((a.steps, b.steps), (a.requests, b.requests)):
        assert table_a.keys() == table_b.keys()
        for key in table_a:
            x, y = table_a[key], table_b[key]
            assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), key


def test_different_seed_different_results():
    s = small(method="psd", requests=60, prompt_len=0)
    assert simulate(s).summary != simulate(s.replace(seed=s.seed + 1)).summary


def test_methods_see_the_same_requests():
    s = small(requests=30, prompt_len=0, rate=2.0)
    runs = [simulate(s.replace(method=m)).requests for m in ("ar", "sd", "psd")]
    for other in runs[1:]:
        for key in ("arrival_s", "prompt_len", "output_len"):
            assert np.array_equal(runs[0][key], other[key])
    assert np.array_equal(runs[1]["acceptance"], runs[2]["acceptance"])
