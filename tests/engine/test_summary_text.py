"""`psdsim engine run` without --json lays a real engine's summary out as `psdsim run` lays out a
simulated one (it was a raw `key: value` dump with Python dict text and Nones)."""

from __future__ import annotations

from psdsim.sim.output.report import format_engine_run


def test_the_shared_keys_are_laid_out_and_the_rest_listed():
    text = format_engine_run({
        "method": "psd", "k": 3, "m": 4, "requests": 16, "throughput_tok_s": 41.23456, "makespan_s": 1.5,
        "latency_ms": {"mean": 300.0, "p50": 290.0, "p90": 350.0, "p99": 380.0}, "ttft_ms": None,
        "tpot_ms": None, "vsr": 0.71234, "driver_pid": 28708, "trace": None, "acceptance_per_pos": [0.5]})
    lines = text.splitlines()
    assert lines[0] == "psdsim engine run · reference · psd (k=3, m=4) · 16 requests"
    assert "throughput (decode steps)  41.2 tok/s" in text and "VSR 0.712" in text
    assert "mean 300.0   p50 290.0   p90 350.0   p99 380.0" in text
    assert "  driver_pid: 28708" in lines and "  trace: –" in lines and "  acceptance_per_pos: [0.5]" in lines
    assert "None" not in text and "{" not in text


def test_vllm_names_its_throughput_for_what_it_is():
    text = format_engine_run({"engine": "vllm", "engine_version": "0.32.0", "method": "sd", "k": 2, "m": 4,
                              "requests": 8, "throughput_tok_s": 10.0})
    assert text.startswith("psdsim engine run · vllm 0.32.0 · sd (k=2, m=4)")
    assert "throughput (makespan)" in text
