"""Hostile inputs to the newer features (adaptive, the pre-drafted tail, transfers, kv_sizing,
balance_by, --intervals, validate --bench, the calibrate trace formats): each a refusal in one
line naming its field, or a run that says what it did with an input it did not use."""

from __future__ import annotations

import json
import math

import pytest

from psdsim.cli import main
from psdsim.sim.scenario import Scenario
from psdsim.sim.scenario_caveats import warnings
from tests.helpers import paths


def test_adaptive_fields_set_for_another_method_say_they_are_not_read():
    """tail= and balance_by= for a method that cannot use them are refused; the adaptive fields
    were dropped in silence, so `--set adaptive_margin=0.5` on sd read as an adaptive run."""
    for method in ("sd", "psd", "ar"):
        notes = warnings(Scenario(method=method, adaptive_margin=0.5, adaptive_modes="psd,sd"))
        assert any(n.startswith("ignored: adaptive_modes and adaptive_margin") and method in n for n in notes)
    assert not any("adaptive_" in n for n in warnings(Scenario(method="adaptive", adaptive_margin=0.5)))
    assert not any("adaptive_" in n for n in warnings(Scenario(method="sd")))


BENCH = paths.ROOT / "examples" / "traces" / "vllm_bench.json"


@pytest.mark.parametrize("completed", [3, 13, True, "12"])
def test_a_bench_result_whose_count_is_not_its_lists_is_refused(tmp_path, capsys, completed):
    """An edited or merged result: 12 requests in its lists, `completed` another count; its
    figures were printed as the measurement of requests the file does not say it completed."""
    doc = {**json.loads(BENCH.read_text()), "completed": completed}
    f = tmp_path / "r.json"
    f.write_text(json.dumps(doc))
    assert main(["validate", "--bench", str(f), "--set", "method=ar", "--set", "target=llama-3.1-8b"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("psdsim: error: --bench: r.json: field 'completed'") and "\n" not in err


def test_the_shipped_and_the_real_bench_results_count_their_lists():
    for path in (BENCH, paths.DATA / "vllm_cpu" / "bench_serve.json"):
        doc = json.loads(path.read_text())
        assert doc["completed"] == len(doc["latencies"])


@pytest.mark.parametrize("dur", [math.nan, math.inf, -5.0])
def test_a_kineto_gpu_op_without_a_time_is_refused_not_read_as_zero(tmp_path, capsys, monkeypatch, dur):
    """A kernel of duration NaN (or negative) was read as 0 s: the verify range around it fit as a
    pass faster than it ran, without a word."""
    from tests.helpers.traces import kineto_trace

    monkeypatch.chdir(tmp_path)
    assert main(["calibrate", str(kineto_trace(tmp_path, dur=dur)), "--out", "p.json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("psdsim: error: ") and err.count("\n") == 1 and "has duration" in err
    assert not (tmp_path / "p.json").exists()


def test_a_plan_objective_past_the_clock_is_refused(tmp_path):
    """latency_p99_ms = 1e308 was taken, never bound, and printed as a 309-digit objective."""
    from psdsim.sim.errors import ScenarioError
    from psdsim.studies.plan import load_plan

    plan = tmp_path / "p.toml"
    plan.write_text("[base]\nrequests = 20\n[slo]\nlatency_p99_ms = 1e308\n")
    with pytest.raises(ScenarioError, match=r"^slo.latency_p99_ms: 1e\+308 ms is past the 1e\+09 s"):
        load_plan(plan)
    plan.write_text("[base]\nrequests = 20\n[slo]\nlatency_p99_ms = 1e12\n")
    assert load_plan(plan).objectives["latency_p99_ms"] == 1e12
