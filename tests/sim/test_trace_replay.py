"""Request traces: replayed faithfully, malformed rows named by line and field."""

from __future__ import annotations

import json

import pytest

from psdsim.cli import main
from psdsim.sim.errors import ScenarioError
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario
from psdsim.sim.trace_replay import read_trace


def _jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_jsonl_trace_replays_arrivals_lengths_and_acceptance(tmp_path):
    rows = [{"arrival_s": 0.5, "prompt_tokens": 100, "output_tokens": 20, "acceptance": 0.9},
            {"arrival_s": 0.0, "prompt_tokens": 50, "output_tokens": 10, "id": "extra columns are fine"},
            {"arrival_s": 2.0, "prompt_tokens": 70, "output_tokens": 5}]
    f = _jsonl(tmp_path / "t.jsonl", rows)
    r = simulate(Scenario(trace=str(f), requests=1000))
    req = r.requests
    assert r.summary["requests"] == 3
    assert req["arrival_s"].tolist() == [0.0, 0.5, 2.0]            # replayed in arrival order
    assert req["prompt_len"].tolist() == [50, 100, 70]
    assert req["output_len"].tolist() == [10, 20, 5]
    assert req["acceptance"][1] == pytest.approx(0.9)               # given
    assert 0 < req["acceptance"][0] < 1 and req["acceptance"][0] != 0.9  # drawn from the prior
    assert (req["admitted_s"] >= req["arrival_s"]).all()


def test_csv_trace_and_the_requests_cap(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,4\n1,20,4\n2,30,4\n")
    assert read_trace(f, 2048).prompt_len.tolist() == [10, 20, 30]
    capped = simulate(Scenario(trace=str(f), requests=2)).summary
    assert capped["requests"] == 2
    # the rows left out are said, not dropped without a word
    assert "trace: replays the first 2 of its 3 rows in arrival order (requests = 2; set requests = 3 to " \
           "replay them all)" in capped["warnings"]
    assert not any(w.startswith("trace:") for w in simulate(Scenario(trace=str(f))).summary["warnings"])


@pytest.mark.parametrize("line, field", [
    ('{"arrival_s": 0, "prompt_tokens": 0, "output_tokens": 5}', "prompt_tokens"),
    ('{"arrival_s": -1, "prompt_tokens": 5, "output_tokens": 5}', "arrival_s"),
    ('{"arrival_s": 0, "prompt_tokens": 5.5, "output_tokens": 5}', "prompt_tokens"),
    ('{"arrival_s": 0, "prompt_tokens": 5}', "output_tokens"),
    ('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": "x"}', "output_tokens"),
    ('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 5, "acceptance": 1.5}', "acceptance"),
    ('{"arrival_s": 0, "prompt_tokens": 2000, "output_tokens": 100}', "prompt_tokens"),  # the larger
    ('{"arrival_s": 0, "prompt_tokens": 100, "output_tokens": 2000}', "output_tokens"),
])
def test_malformed_rows_name_line_and_field(tmp_path, line, field):
    good = '{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 5}'
    f = tmp_path / "bad.jsonl"
    f.write_text(good + "\n" + good + "\n" + line + "\n")
    with pytest.raises(ScenarioError) as err:
        read_trace(f, 2048)
    assert err.value.field == "trace"
    assert "line 3" in str(err.value) and f"'{field}'" in str(err.value)


def test_bad_json_and_csv_header(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 5}\n{oops\n')
    with pytest.raises(ScenarioError, match="line 2"):
        read_trace(f, 2048)
    c = tmp_path / "bad.csv"
    c.write_text("arrival,prompt_tokens,output_tokens\n0,1,1\n")
    with pytest.raises(ScenarioError, match="arrival_s"):
        read_trace(c, 2048)


def test_cli_reports_a_bad_trace_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    f = tmp_path / "t.jsonl"
    f.write_text('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": -5}\n')
    assert main(["run", "--set", f"trace={f}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("psdsim: error: trace: t.jsonl line 1: field 'output_tokens'") and "\n" not in err
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("line, match", [
    ('{"arrival_s": 1e308, "prompt_tokens": 32, "output_tokens": 8}',
     r"'arrival_s': 1e\+308 s is past the 1e\+09 s"),
    ('{"arrival_s": 1000000001, "prompt_tokens": 32, "output_tokens": 8}',
     r"'arrival_s': 1000000001 s is past the 1e\+09 s"),
    ('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 5, "acceptance": 0.9999999999}',
     r"'acceptance': must be in \(0, 1 - 1e-9\], got 0\.9999999999"),
    ('{"arrival_s": 0, "prompt_tokens": 1e300, "output_tokens": 5}',
     r"'prompt_tokens': prompt \+ output = 1e\+300 \+ 5 = 1e\+300 exceeds"),
])
def test_values_the_run_would_alter_are_refused(tmp_path, line, match):
    """An arrival past the clock's horizon was absorbed into its rounding (makespan 0.0 s,
    latency 0.0 ms), an acceptance above the model's cap was lowered to it: both refused, as a
    token count of hundreds of digits is, in a line of readable length."""
    f = tmp_path / "t.jsonl"
    f.write_text(line + "\n")
    with pytest.raises(ScenarioError, match=match) as err:
        read_trace(f, 2048)
    assert len(str(err.value)) < 400


def test_a_late_arrival_the_clock_resolves_still_replays(tmp_path):
    """Within the horizon a trace replays; the run's own end is held to it by the summary
    (tests/sim/test_invalid_figures.py)."""
    f = tmp_path / "t.csv"
    f.write_text("arrival_s,prompt_tokens,output_tokens,acceptance\n0,32,8,\n5e8,32,8,0.999999999\n")
    summary = simulate(Scenario(trace=str(f))).summary
    assert summary["requests"] == 2 and summary["makespan_s"] > 5e8
    f.write_text("arrival_s,prompt_tokens,output_tokens\n0,32,8\n1e9,32,8\n")
    with pytest.raises(ScenarioError, match=r"^summary: makespan_s 1e\+09 s from .* with trace"):
        simulate(Scenario(trace=str(f)))


@pytest.mark.parametrize("field", ["arrival_s", "prompt_tokens", "acceptance"])
@pytest.mark.parametrize("as_csv", [False, True])
def test_a_number_past_a_floats_range_names_row_and_column_briefly(tmp_path, field, as_csv):
    row = {"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 4, field: 10 ** 400}
    if as_csv:
        f = tmp_path / "t.csv"
        f.write_text(",".join(row) + "\n" + ",".join(str(v) for v in row.values()) + "\n")
    else:
        f = tmp_path / "t.jsonl"
        f.write_text(json.dumps(row) + "\n")
    with pytest.raises(ScenarioError, match=f"line {1 + as_csv}: field '{field}'") as err:
        read_trace(f, 2048)
    assert len(str(err.value)) < 300   # not the 401 digits


def test_csv_written_by_spreadsheets_reads(tmp_path):
    """A UTF-8 BOM (Excel) and spaces after the commas are how common tools write a CSV."""
    f = tmp_path / "t.csv"
    f.write_bytes(b"\xef\xbb\xbfarrival_s, prompt_tokens , output_tokens\n0, 10, 4\n")
    trace = read_trace(f, 2048)
    assert trace.prompt_len.tolist() == [10] and trace.output_len.tolist() == [4]


@pytest.mark.parametrize("name, body", [
    ("t.csv", "arrival_s,prompt_tokens,output_tokens,prompt_tokens\n0,10,4,20\n"),
    ("t.jsonl", '{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 4, "prompt_tokens": 20}\n')])
def test_a_column_given_twice_is_refused(tmp_path, name, body):
    f = tmp_path / name
    f.write_text(body)
    with pytest.raises(ScenarioError, match=r"field 'prompt_tokens': .*given twice"):
        read_trace(f, 2048)


@pytest.mark.parametrize("body, says", [
    ("arrival_s,prompt_tokens,output_tokens\n0,10,4\n0,10,4,9\n", "line 3: 4 cells under a header of 3"),
    # BurstGPT with an unquoted comma in Model: its tokens were read one column off, as 4 and 459
    ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,GPT,4,459,74,533,API log\n",
     "line 2: 7 cells under a header of 6 columns (a comma inside a cell not quoted?)")])
def test_a_row_with_more_cells_than_the_header_is_refused_not_cut(tmp_path, body, says):
    """csv.DictReader files the cells past the header under None, which nothing read: a row with
    one too many was replayed without a word, its known columns possibly shifted."""
    f = tmp_path / "t.csv"
    f.write_text(body)
    with pytest.raises(ScenarioError) as exc:
        read_trace(f, 2048)
    assert str(exc.value).startswith(f"trace: t.csv {says}")
    assert str(exc.value).endswith("quote a cell holding a comma")
