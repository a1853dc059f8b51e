"""The memory check refuses, before any allocation, a run the machine cannot hold (issue #14),
and lets through what it can; its estimate follows the streamed layout (a step table past
records.SPILL_ROWS is on disk: a few bytes a step in memory, the rows on temporary disk)."""

from __future__ import annotations

import re

import pytest
from psdsim.sim import footprint, records
from psdsim.sim.errors import ScenarioError
from psdsim.sim.footprint import check_memory, estimate_bytes, spill_bytes, steps_bound
from psdsim.sim.scenario import load_scenario

from tests.conftest import small


def test_the_estimate_grows_with_requests_and_output():
    base = estimate_bytes(small(requests=100))
    assert estimate_bytes(small(requests=1000)) > base
    assert estimate_bytes(small(requests=100, output_len=64)) > base
    assert estimate_bytes(small(requests=100, n=2)) > base


def _refusal(s) -> tuple[str, int]:
    """check_memory's refusal of s: its text and the request count it suggests."""
    with pytest.raises(ScenarioError) as err:
        check_memory([s])
    assert err.value.field == "requests"
    text = str(err.value)
    return text, int(re.search(r"lower requests to about ([\d,]+),", text).group(1).replace(",", ""))


def test_refused_with_the_estimate_the_limit_and_what_fits(monkeypatch):
    monkeypatch.setattr(footprint, "available_bytes", lambda: 10**9)   # 1 GB
    text, fits = _refusal(small(requests=10**7))
    assert "GB of memory" in text and "1.0 GB are available" in text
    assert 0 < estimate_bytes(small(requests=fits)) <= 10**9 < estimate_bytes(small(requests=fits + 1))
    check_memory([small(requests=100)])                                  # fits: no error
    with pytest.raises(ScenarioError):
        check_memory([small(requests=1_000_000)] * 4, "4 runs at once")   # together they do not


def test_no_limit_known_refuses_nothing(monkeypatch):
    monkeypatch.setattr(footprint, "available_bytes", lambda: None)
    monkeypatch.setattr(footprint, "available_disk_bytes", lambda: None)
    check_memory([small(requests=10**9)])


def test_memory_past_the_spill_bound_grows_by_a_few_bytes_a_step():
    """Below SPILL_ROWS a step costs BYTES_PER_STEP; past it BYTES_PER_SPILLED_STEP in memory and
    its row on disk, so a 1M-request run of the default scenario is estimated at ~1.4 GB, not ~19."""
    s = load_scenario()
    million = s.replace(requests=1_000_000)
    steps = steps_bound(million)
    assert steps > 10 * records.SPILL_ROWS
    per_request = footprint.BYTES_PER_REQUEST
    assert estimate_bytes(million) < footprint.BYTES_PER_RUN + 10**6 * per_request + 2 * 10**8 \
        + steps * footprint.BYTES_PER_SPILLED_STEP
    assert estimate_bytes(million) < 2 * 10**9
    assert spill_bytes(million) == (steps * footprint.DISK_BYTES_PER_STEP
                                    + 10**6 * footprint.DISK_BYTES_PER_REQUEST)
    assert spill_bytes(s) == 0   # the default scenario never spills


def test_refused_when_the_temporary_disk_cannot_hold_the_spilled_steps(monkeypatch):
    monkeypatch.setattr(footprint, "available_bytes", lambda: None)
    monkeypatch.setattr(footprint, "available_disk_bytes", lambda: 10**9)
    text, fits = _refusal(small(requests=10**6))
    assert "GB of temporary disk" in text and "TMPDIR" in text
    assert 0 < spill_bytes(small(requests=fits)) <= 10**9 < spill_bytes(small(requests=fits + 1))
    check_memory([small(requests=fits)])


def test_the_machine_reports_a_limit():
    have = footprint.available_bytes()
    assert have is None or have > 0


def test_a_traced_run_counts_its_timeline(monkeypatch):
    """`psdsim run --trace` keeps every timeline slice and builds the trace document at the end
    (~11 KB a PSD step measured): the estimate adds BYTES_PER_TRACED_STEP a step, so a run that
    fits untraced can be refused traced, saying why."""
    s = small(requests=20_000)
    traced = estimate_bytes(s, traced=True) - estimate_bytes(s)
    assert traced == steps_bound(s) * footprint.BYTES_PER_TRACED_STEP
    monkeypatch.setattr(footprint, "available_bytes", lambda: estimate_bytes(s) + 1)
    monkeypatch.setattr(footprint, "available_disk_bytes", lambda: None)
    check_memory([s])
    with pytest.raises(ScenarioError) as err:
        check_memory([s], traced=True)
    text = str(err.value)
    assert "with the timeline for --trace" in text
    fits = int(re.search(r"lower requests to about ([\d,]+),", text).group(1).replace(",", ""))
    assert estimate_bytes(s.replace(requests=fits), traced=True) <= estimate_bytes(s) + 1


def test_psdsim_run_refuses_a_trace_the_machine_cannot_hold(monkeypatch, tmp_path, capsys):
    """Exit 2 with one line naming --trace, before any run, and no trace file written."""
    from psdsim.cli import main

    s = small(requests=20_000)
    monkeypatch.setattr(footprint, "available_bytes", lambda: estimate_bytes(s) + 1)
    monkeypatch.setattr(footprint, "available_disk_bytes", lambda: None)
    sets = [arg for field in ("requests", "m", "k", "output_len", "prompt_len", "seed")
            for arg in ("--set", f"{field}={getattr(s, field)}")]
    trace = tmp_path / "t.json"
    assert main(["run", *sets, "--no-write", "--trace", str(trace)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("psdsim: error:") and "--trace" in err[0]
    assert not trace.exists()


def test_the_python_api_refuses_what_the_cli_refuses(monkeypatch):
    """simulate() runs the CLI's footprint check first: a run the machine cannot hold is a
    ScenarioError at once, not minutes of work ended by the kernel."""
    from psdsim.sim.run import simulate
    monkeypatch.setattr(footprint, "available_bytes", lambda: 10**6)   # 1 MB
    monkeypatch.setattr(footprint, "available_disk_bytes", lambda: None)
    with pytest.raises(ScenarioError, match=r"^requests: .* GB of memory"):
        simulate(load_scenario(overrides=["requests=100000", "output_len=16"]))
