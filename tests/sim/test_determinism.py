"""Same scenario + same seed => identical results, bit for bit."""

from __future__ import annotations

import json

import numpy as np
import pytest

from psdsim.sim.run import simulate
from tests.helpers.scenarios import small


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


def test_two_processes_write_the_same_bytes(tmp_path):
    """Determinism across processes, not only within one: two fresh interpreters with different
    hash seeds (the order of sets and dicts of strings) run the same scenario and write results
    folders whose summary, step and request tables are the same bytes."""
    import os
    import subprocess
    import sys

    args = ["run", "--set", "requests=40", "--set", "output_len=24", "--set", "rate=4"]
    for name, seed in (("a", "1"), ("b", "2")):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run([sys.executable, "-m", "psdsim", *args, "--out", str(tmp_path / name)],
                              capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr
    for file in ("summary.json", "steps.csv", "requests.csv", "scenario.toml"):
        assert (tmp_path / "a" / file).read_bytes() == (tmp_path / "b" / file).read_bytes(), file
