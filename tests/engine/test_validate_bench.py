"""`psdsim validate --bench`: a vllm bench serve result's figures, measured as vLLM computes them
and predicted from a replay of its requests, compared and gated."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from psdsim.cli import main
from psdsim.engine.validate.bench import KEYS, bench_scenario, figures, validate_bench
from psdsim.sim.errors import ScenarioError
from psdsim.sim.run import simulate
from psdsim.sim.trace_replay import read_trace
from tests.helpers import paths

BENCH = paths.ROOT / "examples" / "traces" / "vllm_bench.json"
SYSTEM = ["method=ar", "target=llama-3.1-8b"]


def test_measured_figures_are_vllms():
    doc = json.loads(BENCH.read_text())
    cells = validate_bench(BENCH, None, SYSTEM)["rows"][0]["metrics"]
    ttft_ms = 1000 * np.array(doc["ttfts"])
    assert cells["request_throughput"]["measured"] == pytest.approx(12 / doc["duration"])
    assert cells["output_throughput"]["measured"] == pytest.approx(sum(doc["output_lens"]) / doc["duration"])
    assert cells["ttft_ms.mean"]["measured"] == pytest.approx(ttft_ms.mean())
    assert cells["ttft_ms.p50"]["measured"] == pytest.approx(np.median(ttft_ms))
    # the sample's tokens come 20 ms apart: (latency - ttft) / (output - 1) is 20 ms for each
    assert [cells[f"tpot_ms.{s}"]["measured"] for s in ("mean", "p50", "p99")] == pytest.approx([20.0] * 3)
    e2el_ms = 1000 * np.array(doc["latencies"])
    assert cells["e2el_ms.p99"]["measured"] == pytest.approx(np.percentile(e2el_ms, 99))


REAL = paths.DATA / "vllm_cpu" / "bench_serve.json"
# vLLM's own figures in the result, by the report's keys
REPORTED = {"request_throughput": "request_throughput", "output_throughput": "output_throughput",
            "ttft_ms.mean": "mean_ttft_ms", "ttft_ms.p50": "median_ttft_ms", "ttft_ms.p99": "p99_ttft_ms",
            "tpot_ms.mean": "mean_tpot_ms", "tpot_ms.p50": "median_tpot_ms", "tpot_ms.p99": "p99_tpot_ms"}


def test_a_real_bench_serve_result_is_measured_as_vllm_reported_it():
    """vllm-cpu 0.32's own `vllm bench serve` result (tests/data/vllm_cpu): read as a trace, and
    its figures derived from the per-request lists as vLLM derived the ones it printed."""
    doc = json.loads(REAL.read_text())
    trace = read_trace(REAL, 4096)
    assert trace.prompt_len.tolist() == doc["input_lens"] and trace.output_len.tolist() == doc["output_lens"]
    assert trace.arrival_s.tolist() == pytest.approx([t - doc["start_times"][0] for t in doc["start_times"]])
    cells = validate_bench(REAL, None, SYSTEM)["rows"][0]["metrics"]
    for ours, theirs in REPORTED.items():
        assert cells[ours]["measured"] == pytest.approx(doc[theirs], rel=1e-12), ours


def test_predicted_figures_are_the_replays():
    s = bench_scenario(BENCH, None, SYSTEM)
    assert s.requests == 12 and s.trace == str(BENCH)
    req = simulate(s).requests
    want = figures(req["first_token_s"] - req["arrival_s"], req["finish_s"] - req["arrival_s"],
                   req["output_len"], float(req["finish_s"].max()))
    report = validate_bench(BENCH, None, SYSTEM)
    cells = report["rows"][0]["metrics"]
    assert {key: cells[key]["predicted"] for key in KEYS} == want
    for key in KEYS:
        c = cells[key]
        assert c["error"] == pytest.approx((c["predicted"] - c["measured"]) / c["measured"])


def test_the_gate_and_the_report(capsys):
    argv = ["validate", "--bench", str(BENCH), *(f"--set={x}" for x in SYSTEM)]
    assert main([*argv, "--max-error", "tpot=1000"]) == 0
    out = capsys.readouterr().out
    assert "TPOT p50 ms" in out and "gate passed" in out
    assert main([*argv, "--max-error", "e2el_ms.mean=0.001"]) == 1
    assert capsys.readouterr().err.startswith("psdsim: gate missed: vllm_bench e2el_ms.mean error")
    assert main([*argv, "--json"]) == 0
    assert set(json.loads(capsys.readouterr().out)["rows"][0]["metrics"]) == set(KEYS)


@pytest.mark.parametrize("extra, field", [
    (["--set", "requests=5"], "requests"),
    (["--set", "rate=2"], "rate"),
    (["--out", "somewhere"], "--out"),
    (["--traces", "run"], "--traces"),
    (["--max-error", "vsr=5"], "--max-error"),
])
def test_what_does_not_apply_is_one_line(capsys, extra, field):
    assert main(["validate", "--bench", str(BENCH), "--set", "method=ar", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"psdsim: error: {field}: ") and "\n" not in err


def test_a_scenario_file_that_replays_it_otherwise_is_refused(tmp_path):
    f = tmp_path / "system.toml"
    f.write_text('method = "ar"\ntarget = "llama-3.1-8b"\ntrace_speedup = 2.0\n')
    with pytest.raises(ScenarioError) as err:
        bench_scenario(BENCH, f, [])
    assert err.value.field == "trace_speedup"


def test_a_result_without_client_timings_is_one_line(tmp_path, capsys):
    doc = json.loads(BENCH.read_text())
    del doc["ttfts"]
    f = tmp_path / "r.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(ScenarioError, match="field 'ttfts'"):
        validate_bench(f, None, SYSTEM)
    assert main(["validate", "--bench", str(f), "--set", "method=ar"]) == 2
    assert capsys.readouterr().err.startswith("psdsim: error: --bench: r.json: field 'ttfts'")


def _compressed(f: Path) -> None:
    import gzip

    f.write_bytes(gzip.compress(b" " * 10_000))


@pytest.mark.parametrize("make, problem", [
    (lambda f: f.mkdir(), "'r.json' is a folder, not a benchmark result"),
    (lambda f: f.symlink_to(f), "cannot use 'r.json' (a loop of symbolic links)"),
    (_compressed, "r.json: not UTF-8 JSON text"),
    (lambda f: f.write_text("{}" + " " * 100), "r.json: larger than"),
])
def test_a_result_that_is_no_readable_file_is_one_line(tmp_path, capsys, monkeypatch, make, problem):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("psdsim.engine.validate.bench.MAX_RESULT_BYTES", 64)
    make(tmp_path / "r.json")
    assert main(["validate", "--bench", "r.json", "--set", "method=ar"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"psdsim: error: --bench: {problem}") and "\n" not in err


def _edited(tmp_path: Path, **changes: object) -> Path:
    doc = json.loads(BENCH.read_text())
    doc.update(changes)
    f = tmp_path / "r.json"
    f.write_text(json.dumps(doc))
    return f


N = 12
BIG = 10 ** 400   # an integer past a float's range


@pytest.mark.parametrize("changes, problem", [
    ({"ttfts": [-0.3] * N}, "negative TTFT"),
    ({"ttfts": [9.0] * N}, "after its end-to-end latency"),
    ({"ttfts": [0.0] * N, "latencies": [0.0] * N}, "latency <= 0"),
    ({"duration": 0.01}, "shorter than its requests span"),
    ({"duration": 1e-300}, "shorter than its requests span"),
    ({"duration": BIG}, "not a positive number"),
    ({"ttfts": [BIG] * N}, "field 'ttfts'"),
    ({"latencies": [1e308] * N, "start_times": [0.0] * N, "duration": 1e308}, "too large"),
    ({"latencies": [1.5, 1.6]}, "differ in length"),
    ({"output_lens": [0.5] * N}, "whole number of tokens"),
])
def test_a_time_no_client_measures_is_refused(tmp_path, capsys, changes, problem):
    f = _edited(tmp_path, **changes)
    assert main(["validate", "--bench", str(f), *(a for s in SYSTEM for a in ("--set", s))]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("psdsim: error: --bench: r.json: ") and problem in err and "\n" not in err


def test_tpot_of_one_token_outputs_is_undefined_not_nan(tmp_path):
    cells = validate_bench(_edited(tmp_path, output_lens=[1] * N), None, SYSTEM)["rows"][0]["metrics"]
    assert all(cells[f"tpot_ms.{s}"]["measured"] is None for s in ("mean", "p50", "p90", "p99"))


def test_a_key_given_twice_is_refused(tmp_path):
    f = tmp_path / "r.json"
    f.write_text(BENCH.read_text().replace('"duration":', '"duration": 0.01, "duration":', 1))
    with pytest.raises(ScenarioError, match="'duration' given twice"):
        validate_bench(f, None, SYSTEM)


def test_a_result_of_another_catalog_model_is_refused():
    with pytest.raises(ScenarioError) as err:
        validate_bench(BENCH, None, ["method=ar", "target=qwen3-32b", "gpu=h200"])
    assert err.value.field == "target" and "llama-3.1-8b" in err.value.fix


def test_a_result_of_a_model_in_no_catalog_is_a_note(tmp_path):
    report = validate_bench(_edited(tmp_path, model_id="someone/private-model"), None, SYSTEM)
    assert report["notes"] == ["model_id 'someone/private-model' is in no catalog entry: predicted as "
                               "llama-3.1-8b unchecked"]
