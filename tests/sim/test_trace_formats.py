"""Public trace formats: each shipped sample is read by its columns and clock, a malformed file
of each is one line naming its row and column, and a trace replays in a window and at a pace."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from psdsim.cli import main
from psdsim.sim.errors import ScenarioError
from psdsim.sim.output.report import arrivals_line
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario, load_scenario
from psdsim.sim.trace_formats import datetime_ns
from psdsim.sim.trace_replay import Replay, read_trace
from tests.helpers import paths

TRACES = paths.ROOT / "examples" / "traces"
SAMPLES = ("azure_2023.csv", "azure_2024.csv", "burstgpt.csv", "mooncake.jsonl", "vllm_bench.json")
# The samples' first arrivals, as each format's clock writes them, counted from the first request:
# Azure's date-times to the 100 ns, Mooncake's milliseconds, vLLM's client timer in seconds.
FIRST_GAPS_S = {
    "azure_2023.csv": [0.028635, 0.070939, 0.394876],     # 18:15:46.7092250 - 18:15:46.6805900, ...
    "azure_2024.csv": [0.028635, 0.070939, 0.394876],     # 00:00:00.038565 - 00:00:00.009930, ...
    "burstgpt.csv": [0.0, 0.0, 0.0],                      # whole seconds, all within the first
    "mooncake.jsonl": [0.028, 0.070, 0.394],              # 28 ms, 70 ms, 394 ms
    "vllm_bench.json": [0.028635, 0.070939, 0.394876],    # start_times 81234.528635 - 81234.5, ...
}


def _write_samples(folder: Path) -> list[Path]:
    sys.path.insert(0, str(TRACES))
    try:
        from write_samples import write_samples
    finally:
        sys.path.remove(str(TRACES))
    return write_samples(folder)


def test_the_shipped_samples_are_what_the_script_writes(tmp_path):
    for written in _write_samples(tmp_path):
        assert written.read_bytes() == (TRACES / written.name).read_bytes(), written.name


@pytest.mark.parametrize("name", SAMPLES)
def test_each_format_is_read_by_its_columns_and_clock(name):
    trace = read_trace(TRACES / name, 2048)
    first = json.loads((TRACES / "mooncake.jsonl").read_text().splitlines()[0])
    assert len(trace.arrival_s) == 12 and trace.arrival_s[0] == 0.0
    assert trace.prompt_len[0] == first["input_length"] and trace.output_len[0] == first["output_length"]
    assert trace.arrival_s[1:4] == pytest.approx(FIRST_GAPS_S[name], abs=1e-9)
    assert np.isnan(trace.acceptance).all()
    summary = simulate(Scenario(trace=str(TRACES / name))).summary
    assert summary["requests"] == 12


def test_the_readme_shows_one_example_of_each_format():
    from tests.helpers.cli import readme_commands
    from tests.helpers.paths import README

    commands = readme_commands(README.read_text(encoding="utf-8"))
    shown = {name: [c for c in commands if f"trace=examples/traces/{name}" in c] for name in SAMPLES}
    assert all(len(lines) == 1 for lines in shown.values()), shown
    assert sorted(SAMPLES) == sorted(p.name for p in TRACES.iterdir() if p.suffix != ".py")


def test_the_formats_agree_on_the_same_requests():
    prompts = {name: read_trace(TRACES / name, 2048).prompt_len.tolist() for name in SAMPLES}
    assert len({tuple(p) for p in prompts.values()}) == 1


def test_date_times_are_read_to_the_nanosecond():
    assert datetime_ns("1970-01-01 00:00:01.0000001") == 1_000_000_100
    assert datetime_ns("1970-01-01T01:00:00+01:00") == 0
    assert datetime_ns("2024-05-10 00:00:00.009930+00:00") - datetime_ns("2024-05-10 00:00:00Z") == 9_930_000
    with pytest.raises(ValueError, match="date-time"):
        datetime_ns("16/11/2023 18:15")


AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,10,5\n"
AZURE_2024 = "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.009930+00:00,10,5\n"
BURSTGPT = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,10,5,15,API log\n"
MOONCAKE = '{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [0]}\n'


def _bench(**changes) -> str:
    doc = {"num_prompts": 2, "request_rate": 4.0, "max_concurrency": None, "input_lens": [10, 12],
           "output_lens": [5, 6], "start_times": [100.0, 100.5], "errors": ["", ""]}
    return json.dumps({**doc, **changes})


@pytest.mark.parametrize("name, text, where, column", [
    ("a.csv", AZURE + "2023-11-16 18:15:47,ten,5\n", "line 3", "ContextTokens"),
    ("a.csv", AZURE + "yesterday,10,5\n", "line 3", "TIMESTAMP"),
    ("a.csv", AZURE + "2023-11-16 18:15:47,10,\n", "line 3", "GeneratedTokens"),
    ("a.csv", AZURE_2024 + "2024-05-10 00:00:00.5+00:00,10,-5\n", "line 3", "GeneratedTokens"),
    ("a.csv", AZURE_2024 + "2024-05-10 24:00:00.5+00:00,10,5\n", "line 3", "TIMESTAMP"),
    ("b.csv", BURSTGPT + "6,GPT-4,10,0,10,Conversation log\n", "line 3", "Response tokens"),
    ("b.csv", BURSTGPT + "x,GPT-4,10,4,14,Conversation log\n", "line 3", "Timestamp"),
    ("m.jsonl", MOONCAKE + '{"timestamp": 5, "input_length": 2.5, "output_length": 5}\n', "line 2",
     "input_length"),
    ("m.jsonl", MOONCAKE + '{"timestamp": 5, "input_length": 10}\n', "line 2", "output_length"),
    ("r.json", _bench(output_lens=[5, 0]), "request 1", "output_lens"),
    ("r.json", _bench(errors=["", "Bad Request"]), "request 1", "errors"),
    ("r.json", _bench(start_times=[100.0, "soon"]), "request 1", "start_times"),
])
def test_a_malformed_row_of_each_format_names_its_row_and_column(tmp_path, capsys, monkeypatch, name, text,
                                                                  where, column):
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(ScenarioError) as err:
        read_trace(f, 2048)
    assert err.value.field == "trace" and f"{name} {where}: field '{column}'" in str(err.value)
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--set", f"trace={f}"]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith(f"psdsim: error: trace: {name} {where}: field '{column}'") and "\n" not in line
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("changes, match", [
    ({"input_lens": None, "output_lens": None}, r"'input_lens': missing .* --save-detailed"),
    ({"start_times": None}, r"'start_times': missing, and requests were paced \(request_rate 4\.0"),
    ({"output_lens": [5]}, r"per-request lists differ in length"),
])
def test_a_bench_result_that_cannot_be_replayed_says_why(tmp_path, changes, match):
    f = tmp_path / "r.json"
    f.write_text(json.dumps({k: v for k, v in json.loads(_bench(**changes)).items() if v is not None}))
    with pytest.raises(ScenarioError, match=match):
        read_trace(f, 2048)


def test_a_bench_result_without_start_times_sent_at_once_arrives_at_zero(tmp_path):
    f = tmp_path / "r.json"
    doc = json.loads(_bench(request_rate="inf"))
    del doc["start_times"]
    f.write_text(json.dumps(doc))
    assert read_trace(f, 2048).arrival_s.tolist() == [0.0, 0.0]


def test_a_header_of_no_known_format_lists_them(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("when,in,out\n0,1,1\n")
    with pytest.raises(ScenarioError) as err:
        read_trace(f, 2048)
    assert "TIMESTAMP,ContextTokens,GeneratedTokens (Azure LLM inference)" in err.value.fix
    assert "Timestamp,Request tokens,Response tokens (BurstGPT)" in err.value.fix


def test_a_byte_order_mark_before_the_header_is_not_part_of_its_first_column(tmp_path):
    f = tmp_path / "a.csv"
    f.write_bytes(b"\xef\xbb\xbf" + AZURE.encode())
    assert read_trace(f, 2048).prompt_len.tolist() == [10]


@pytest.mark.parametrize("name, text, first", [
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens,acceptance\n2023-11-16 18:15:46.68,10,5,0.05\n"
              "2023-11-16 18:15:47.00,10,5,\n", "line 2"),
    ("b.csv", "Timestamp,Request tokens,Response tokens,acceptance\n5,10,5,0.05\n6,10,5,\n", "line 2"),
    ("m.jsonl", '{"timestamp": 0, "input_length": 10, "output_length": 5, "acceptance": 0.05}\n'
                '{"timestamp": 5, "input_length": 10, "output_length": 5}\n', "line 1"),
])
def test_an_acceptance_column_of_a_public_format_is_read_as_psdsims_own(tmp_path, name, text, first):
    f = tmp_path / name
    f.write_text(text)
    acceptance = read_trace(f, 2048).acceptance
    assert acceptance[0] == 0.05 and np.isnan(acceptance[1])
    f.write_text(text.replace("0.05", "1.5"))
    with pytest.raises(ScenarioError, match=rf"{name} {first}: field 'acceptance': must be in \(0, 1"):
        read_trace(f, 2048)


def test_a_trace_out_of_arrival_order_replays_sorted_and_says_so(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text(MOONCAKE + '{"timestamp": 50, "input_length": 20, "output_length": 5}\n'
                 '{"timestamp": 20, "input_length": 30, "output_length": 5}\n')
    trace = read_trace(f, 2048)
    assert trace.prompt_len.tolist() == [10, 30, 20]
    assert trace.notes == ("trace: m.jsonl is not in arrival order (line 3 arrives before line 2; 1 row "
                           "arrives before the row above), replayed sorted by arrival",)
    assert trace.notes[0] in simulate(Scenario(trace=str(f))).summary["warnings"]
    assert read_trace(TRACES / "mooncake.jsonl", 2048).notes == ()


def test_an_errors_column_of_psdsims_own_trace_is_an_extra_column(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("arrival_s,prompt_tokens,output_tokens,errors\n0,10,4,timeout\n")
    assert read_trace(f, 2048).prompt_len.tolist() == [10]


def test_a_window_and_a_speedup_replay_part_of_the_trace_faster():
    whole = read_trace(TRACES / "azure_2023.csv", 2048)
    part = read_trace(TRACES / "azure_2023.csv", 2048, Replay(speedup=2.0, start_s=1.0, duration_s=1.5))
    keep = (whole.arrival_s >= 1.0) & (whole.arrival_s < 2.5)
    assert 0 < keep.sum() < len(keep)
    assert part.arrival_s.tolist() == ((whole.arrival_s[keep] - 1.0) / 2.0).tolist()
    assert part.prompt_len.tolist() == whole.prompt_len[keep].tolist()


def test_the_scenario_fields_pace_the_run():
    path = str(TRACES / "mooncake.jsonl")
    slow = simulate(Scenario(trace=path)).requests["arrival_s"]
    fast = simulate(Scenario(trace=path, trace_speedup=4.0)).requests["arrival_s"]
    assert fast.tolist() == (slow / 4.0).tolist()
    windowed = simulate(Scenario(trace=path, trace_start_s=1.0, trace_duration_s=1.0)).summary
    assert windowed["requests"] == int(((slow >= 1.0) & (slow < 2.0)).sum())


@pytest.mark.parametrize("pacing, said", [
    ({}, "arrivals: as in trace mooncake.jsonl"),
    ({"trace_speedup": 2.0, "trace_start_s": 0.5},
     "arrivals: trace mooncake.jsonl from 0.5 s to its end, at 2× its recorded rate"),
    ({"trace_duration_s": 1.5}, "arrivals: trace mooncake.jsonl from 0 s to 1.5 s, at 1× its recorded rate")])
def test_the_run_header_says_which_part_of_the_trace_ran_at_what_pace(pacing, said):
    assert arrivals_line(Scenario(trace=str(TRACES / "mooncake.jsonl"), **pacing)) == said


@pytest.mark.parametrize("overrides, field", [
    (["trace_speedup=0"], "trace_speedup"),
    (["trace_speedup=inf"], "trace_speedup"),
    (["trace_start_s=-1"], "trace_start_s"),
    (["trace_duration_s=0"], "trace_duration_s"),
    (["trace_start_s=1000"], "trace_start_s"),     # past every arrival: no request to replay
])
def test_a_window_that_replays_nothing_or_a_pace_that_is_no_pace_is_refused(overrides, field):
    with pytest.raises(ScenarioError) as err:
        simulate(load_scenario(overrides=[f"trace={TRACES / 'azure_2024.csv'}", *overrides]))
    assert err.value.field == field


def test_the_window_fields_need_a_trace():
    with pytest.raises(ScenarioError) as err:
        load_scenario(overrides=["trace_speedup=2"])
    assert err.value.field == "trace_speedup" and "trace" in err.value.fix
