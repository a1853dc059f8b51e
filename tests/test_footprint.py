"""The memory check refuses, before any allocation, a run the machine cannot hold (issue #14),
and lets through what it can."""

from __future__ import annotations

import re

import pytest
from psdsim.sim import footprint
from psdsim.sim.errors import ScenarioError
from psdsim.sim.footprint import check_memory, estimate_bytes

from tests.conftest import small


def test_the_estimate_grows_with_requests_and_output():
    base = estimate_bytes(small(requests=100))
    assert estimate_bytes(small(requests=1000)) > base
    assert estimate_bytes(small(requests=100, output_len=64)) > base
    assert estimate_bytes(small(requests=100, n=2)) > base


def test_refused_with_the_estimate_the_limit_and_what_fits(monkeypatch):
    monkeypatch.setattr(footprint, "available_bytes", lambda: 10**9)   # 1 GB
    s = small(requests=10**7)
    with pytest.raises(ScenarioError) as err:
        check_memory([s])
    text = str(err.value)
    assert err.value.field == "requests" and "GB of memory" in text and "1.0 GB are available" in text
    fits = int(re.search(r"lower requests to about ([\d,]+),", text).group(1).replace(",", ""))
    assert 0 < estimate_bytes(small(requests=fits)) <= 10**9   # the count it suggests does fit
    check_memory([small(requests=100)])                                  # fits: no error
    with pytest.raises(ScenarioError):
        check_memory([small(requests=400_000)] * 4, "4 runs at once")   # together they do not


def test_no_limit_known_refuses_nothing(monkeypatch):
    monkeypatch.setattr(footprint, "available_bytes", lambda: None)
    check_memory([small(requests=10**9)])


def test_the_machine_reports_a_limit():
    have = footprint.available_bytes()
    assert have is None or have > 0
