"""The vLLM runner's run written as a `vllm bench serve` result: `psdsim validate --bench` reads it
and measures what the runner's own summary measured, and predicts it with the tiny models given
by their config.json. Runs without vLLM, on RequestOutput-shaped objects; the run on real vLLM is
the opt-in test at the end of tests/engine/test_vllm.py."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from psdsim.cli import main
from psdsim.engine.validate.bench import validate_bench
from psdsim.engine.vllm import VllmConfig
from psdsim.engine.vllm.bench_result import bench_result, write_bench_result
from psdsim.engine.vllm.config import EngineConfigError
from psdsim.engine.vllm.summary import summarize
from psdsim.sim.errors import ScenarioError
from psdsim.sim.trace_replay import read_trace
from tests.helpers.engines import request_output  # a RequestOutput with its RequestStateStats

# The config.json transformers 5.19 saves for the runner's tiny Qwen3 target (engine/vllm/models.py).
TINY_QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 1, "dtype": "float32", "eos_token_id": 2, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 256,
    "initializer_range": 0.02, "intermediate_size": 512, "layer_types": ["full_attention", "full_attention"],
    "max_position_embeddings": 4096, "max_window_layers": 28, "model_type": "qwen3", "num_attention_heads": 4,
    "num_hidden_layers": 2, "num_key_value_heads": 4, "pad_token_id": 0, "rms_norm_eps": 1e-06,
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}, "sliding_window": None,
    "tie_word_embeddings": False, "transformers_version": "5.19.0", "use_cache": True,
    "use_sliding_window": False, "vocab_size": 1024}
START = 1000.0


OUTPUTS = [request_output(32, 16, START + 0.001 * i, 0.05 + 0.02 * i, 50.0 + 0.02 * i, 50.3 + 0.07 * i)
           for i in range(6)]
MAKESPAN = 0.75


def _written(tmp_path: Path) -> Path:
    result = bench_result(OUTPUTS, model_id=str(tmp_path / "target"), start_wall=START, makespan_s=MAKESPAN,
                          when=datetime(2026, 1, 2, 3, 4, 5))
    assert result is not None
    path = tmp_path / "bench.json"
    write_bench_result(path, result)
    return path


def _tiny(tmp_path: Path) -> str:
    folder = tmp_path / "target"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(TINY_QWEN3, indent=2))
    return str(folder)


def test_the_result_is_read_as_a_bench_serve_trace_of_requests_sent_at_once(tmp_path):
    path = _written(tmp_path)
    doc = json.loads(path.read_text())
    assert (doc["request_rate"], doc["max_concurrency"], doc["date"]) == ("inf", None, "20260102-030405")
    assert "itls" not in doc   # offline vLLM gives no per-token times: left out, not invented
    trace = read_trace(path, 4096)
    assert trace.arrival_s.tolist() == [0.0] * 6
    assert trace.prompt_len.tolist() == [32] * 6 and trace.output_len.tolist() == [16] * 6


def test_validate_measures_what_the_runner_summary_measured(tmp_path):
    summary = summarize(OUTPUTS, method="sd", k=3, m=4, start_wall=START, makespan_s=MAKESPAN, counters=None)
    tiny = _tiny(tmp_path)
    report = validate_bench(_written(tmp_path), None, ["method=sd", f"target={tiny}", f"draft={tiny}",
                                                       "acceptance=0.5", "m=4"])
    cells = report["rows"][0]["metrics"]
    for stat in ("mean", "p50", "p90", "p99"):
        assert cells[f"ttft_ms.{stat}"]["measured"] == pytest.approx(summary["ttft_ms"][stat], rel=1e-12)
        assert cells[f"tpot_ms.{stat}"]["measured"] == pytest.approx(summary["tpot_ms"][stat], rel=1e-12)
        assert cells[f"e2el_ms.{stat}"]["measured"] == pytest.approx(summary["latency_ms"][stat], rel=1e-12)
        assert cells[f"e2el_ms.{stat}"]["predicted"] > 0
    assert cells["output_throughput"]["measured"] == pytest.approx(summary["output_tok_s"])
    assert cells["request_throughput"]["measured"] == pytest.approx(6 / MAKESPAN)
    assert report["requests"] == 6
    assert report["notes"] == []   # the result's model_id is the folder the target's config.json is in


def test_a_result_of_another_folder_than_the_targets_is_a_note(tmp_path):
    tiny = _tiny(tmp_path)
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "config.json").write_text(json.dumps(TINY_QWEN3))
    report = validate_bench(_written(tmp_path), None, ["method=ar", f"target={other / 'config.json'}"])
    assert report["notes"] == [f"model_id {tiny!r} is in no catalog entry: predicted as "
                               f"{other / 'config.json'} unchecked"]


def test_the_command_line_prints_the_report(tmp_path, capsys):
    tiny = _tiny(tmp_path)
    argv = ["validate", "--bench", str(_written(tmp_path)), "--set", "method=sd", "--set", f"target={tiny}",
            "--set", f"draft={tiny}", "--set", "acceptance=0.5", "--set", "m=4"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "bench.json: 6 requests of" in out and "TPOT p50 ms" in out


def test_the_duration_spans_a_request_that_ends_past_the_makespan(tmp_path):
    # the last request's end (frontend TTFT + engine-core decode time) passes the makespan by 1%
    late = [*OUTPUTS[:-1], request_output(32, 16, START, 0.05, 50.0, 50.0 + MAKESPAN * 1.01 - 0.05)]
    result = bench_result(late, model_id="m", start_wall=START, makespan_s=MAKESPAN,
                          when=datetime(2026, 1, 1))
    assert result is not None and result["duration"] == pytest.approx(MAKESPAN * 1.01)
    assert max(result["latencies"]) == result["duration"]
    path = tmp_path / "late.json"
    write_bench_result(path, result)
    cells = validate_bench(path, None, ["method=ar", f"target={_tiny(tmp_path)}"])["rows"][0]["metrics"]
    assert cells["request_throughput"]["measured"] == pytest.approx(6 / (MAKESPAN * 1.01))


def test_without_request_metrics_no_result_is_made():
    bare = SimpleNamespace(prompt_token_ids=[1, 2], outputs=[SimpleNamespace(token_ids=[3])], metrics=None)
    made = bench_result([bare], model_id="m", start_wall=0.0, makespan_s=1.0, when=datetime(2026, 1, 1))
    assert made is None


@pytest.mark.parametrize(("changes", "says"), [
    ({"n": 2}, "one completion per request"),
    ({"bench_result": Path("/no/such/folder/r.json")}, "an existing folder"),
])
def test_a_result_that_cannot_be_written_is_refused_before_the_run(changes, says):
    with pytest.raises(EngineConfigError, match=says):
        VllmConfig(**{"bench_result": Path("r.json"), **changes}).check()


def test_a_bench_result_is_written_whole_and_never_over_a_users_file(tmp_path):
    """The runner's result goes in place by a rename (no half-written file where validate
    --bench reads one), and a file there that psdsim did not write is refused and kept."""
    path = _written(tmp_path)
    assert json.loads(path.read_text(encoding="utf-8"))["completed"] == len(OUTPUTS)
    mine = tmp_path / "mine.json"
    mine.write_text("my notes\n")
    result = json.loads(path.read_text(encoding="utf-8"))
    with pytest.raises(ScenarioError, match="--bench-result"):
        write_bench_result(mine, result)
    assert mine.read_text() == "my notes\n"
