"""The memory check refuses, before any allocation, a run the machine cannot hold,
and lets through what it can; its estimate follows the streamed layout (a step table past
records.SPILL_ROWS is on disk: a few bytes a step in memory, the rows on temporary disk)."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from psdsim.sim import footprint, records
from psdsim.sim.errors import ScenarioError
from psdsim.sim.footprint import check_memory, estimate_bytes, spill_bytes, steps_bound
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario, load_scenario
from tests.helpers.scenarios import small


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


METHODS = ("ar", "sd", "psd", "sd-2m", "sd-5gpu", "pearl", "psd+tetris", "adaptive")


@st.composite
def small_scenarios(draw: st.DrawFn) -> Scenario:
    """Small runs of every method, offline or with arrivals spread in time, chunked or not, with
    a KV cache that holds few requests or many."""
    method = draw(st.sampled_from(METHODS))
    chunked = draw(st.booleans())
    return Scenario(
        method=method, requests=draw(st.integers(1, 30)), n=draw(st.sampled_from([1, 2])),
        m=draw(st.sampled_from([1, 2, 4, 16])), k=draw(st.integers(1, 5)),
        extra=1 if method == "psd+tetris" else 0, output_len=draw(st.integers(1, 48)),
        prompt_len=draw(st.sampled_from([0, 16, 700])), seed=draw(st.integers(0, 99)),
        rate=draw(st.sampled_from([None, 0.01, 1.0, 50.0])),
        num_gpu_blocks_override=draw(st.sampled_from([None, 130])),
        abort_fraction=draw(st.sampled_from([0.0, 0.3])),
        enable_chunked_prefill=True if chunked else None, max_num_batched_tokens=512 if chunked else 2048)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_scenarios())
def test_the_steps_bound_is_never_below_the_steps_a_run_takes(s):
    assert len(simulate(s).steps["kind"]) <= steps_bound(s)


def test_one_request_at_a_time_is_bounded_by_a_step_a_token():
    """rate=0.01 brings a request every ~100 s: each runs alone, a step per output token, not
    the tokens over m."""
    s = load_scenario(overrides=["requests=300", "rate=0.01", "method=ar"])
    assert len(simulate(s).steps["kind"]) <= steps_bound(s)


def test_sizes_read_in_the_unit_they_fill():
    assert [footprint.size_text(b) for b in (512, 812_000, 1_700_000, 15.3e9, 2e12)] == \
        ["512 bytes", "812.0 kB", "1.7 MB", "15.3 GB", "2.0 TB"]


def test_a_small_temporary_disk_is_refused_in_megabytes_for_one_method(monkeypatch, capsys):
    """Not "needs 0.0 GB, has 0.0 GB free", nor "1 methods'"."""
    from psdsim.cli import main

    monkeypatch.setattr(footprint, "available_bytes", lambda: None)
    monkeypatch.setattr(footprint, "available_disk_bytes", lambda: 2 * 10**6)
    assert main(["compare", "--set", "requests=10000", "--methods", "ar", "--no-write"]) == 2
    err = capsys.readouterr().err
    assert "MB of temporary disk" in err and "has 2.0 MB free" in err and "0.0 GB" not in err, err
    assert "(the results of 1 method kept)" in err, err


def test_a_ulimit_on_the_address_space_caps_the_memory_available(monkeypatch):
    """`ulimit -v` (RLIMIT_AS) binds below MemAvailable: the check reads it, less what the
    process maps already."""
    import resource

    limit = 2**30
    monkeypatch.setattr(resource, "getrlimit", lambda which: (limit, resource.RLIM_INFINITY)
                        if which == resource.RLIMIT_AS else (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    have = footprint.available_bytes()
    assert have is not None and have < limit


def test_running_out_of_memory_anyway_is_one_line(monkeypatch, capsys):
    from psdsim.cli import main
    from psdsim.commands import run

    def exhausted(_args):
        raise MemoryError

    monkeypatch.setattr(run, "run", exhausted)
    assert main(["run", "--no-write"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("psdsim: error: memory: the command ran out of memory") and "fix: " in err
    assert len(err.splitlines()) == 1, err


def test_a_kineto_trace_too_large_for_the_memory_is_refused_before_it_is_parsed(monkeypatch, tmp_path):
    from psdsim.calibration import kineto
    from psdsim.calibration.ranges import PRESETS

    trace = tmp_path / "t.pt.trace.json"
    trace.write_text('{"traceEvents": []}')
    monkeypatch.setattr(kineto, "available_bytes", lambda: 100)
    monkeypatch.setattr(kineto.json, "loads", lambda _data: pytest.fail("parsed"))
    with pytest.raises(ScenarioError, match=r"19 bytes of trace JSON take about 152 bytes of memory"):
        kineto.read_kineto(trace, PRESETS["psdsim"])
def test_the_python_api_refuses_what_the_cli_refuses(monkeypatch):
    """simulate() runs the CLI's footprint check first: a run the machine cannot hold is a
    ScenarioError at once, not minutes of work ended by the kernel."""
    from psdsim.sim.run import simulate
    monkeypatch.setattr(footprint, "available_bytes", lambda: 10**6)   # 1 MB
    monkeypatch.setattr(footprint, "available_disk_bytes", lambda: None)
    with pytest.raises(ScenarioError, match=r"^requests: .* of memory"):
        simulate(load_scenario(overrides=["requests=100000", "output_len=16"]))
