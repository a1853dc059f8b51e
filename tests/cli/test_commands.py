"""The `psdsim` command as a user meets it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from psdsim.cli import main
from psdsim.sim.output.own_files import MARKER

FAST = ["--set", "requests=24", "--set", "output_len=16", "--set", "m=4", "--set", "prompt_len=32"]


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def test_run_writes_a_complete_results_folder(capsys):
    assert main(["run", *FAST]) == 0
    out = capsys.readouterr().out
    assert "throughput (decode steps)" in out and "approximate" in out
    folders = list(Path("results").iterdir())
    assert len(folders) == 1
    folder = folders[0]
    assert {p.name for p in folder.iterdir()} == {"summary.json", "steps.csv", "requests.csv",
                                                  "scenario.toml", MARKER}
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["method"] == "psd" and summary["fits"] is True
    # The resolved scenario reproduces the run exactly.
    assert main(["run", str(folder / "scenario.toml"), "--json", "--no-write"]) == 0
    assert json.loads(capsys.readouterr().out) == summary


def test_json_prints_only_the_summary(capsys):
    assert main(["run", *FAST, "--json", "--no-write", "--set", "k=4", "--set", "link=nvlink4"]) == 0
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["k"] == 4
    expected_keys = {"method", "k", "m", "requests", "makespan_s", "throughput_tok_s",
                     "throughput_tok_s_trim80", "throughput_tok_s_trim70", "output_tok_s", "e2el_ms",
                     "latency_ms", "ttft_ms", "tpot_ms", "vsr", "parallelization_rate", "comm_share",
                     "link_share", "drafter_busy", "verifier_busy", "decode_steps", "prefill_steps",
                     "preemptions", "mean_draft_ms", "mean_verify_ms", "mean_comm_ms", "fits",
                     "infeasible_reason"}
    assert expected_keys <= summary.keys()
    assert set(summary["latency_ms"]) == {"mean", "p50", "p90", "p99"}


@pytest.mark.parametrize("args, field", [
    (["--set", "k=0"], "k:"),
    (["--set", "n=0"], "n:"),
    (["--set", "gpu=h900"], "gpu:"),
    (["--set", "bogus=1"], "bogus:"),
    (["missing.toml"], "scenario:"),
    (["--set", "target=llama-3.3-70b", "--set", "draft=llama-3.1-8b"], "target:"),
])
def test_bad_input_is_one_line_exit_2_nothing_written(capsys, args, field):
    assert main(["run", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("psdsim: error: " + field) and "fix:" in err
    assert not Path("results").exists()


def test_the_header_names_prompts_and_samples_when_prompts_fan_out(capsys, tmp_path):
    assert main(["run", *FAST, "--set", "n=2", "--out", str(tmp_path / "r")]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert "prompts × 2 samples" in head


def test_unwritable_out_is_a_clear_error(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["run", *FAST, "--out", str(blocker / "sub")]) == 2
    assert "--out" in capsys.readouterr().err


def test_compare_prints_side_by_side_with_ratios(capsys):
    assert main(["compare", *FAST]) == 0
    out = capsys.readouterr().out
    assert "psd/sd" in out and "psd/ar" in out and "throughput tok/s" in out
    folder = next(Path("results").iterdir())
    report = json.loads((folder / "compare.json").read_text())
    assert set(report["summaries"]) == {"ar", "sd", "psd"}
    ratio = report["ratios"]["psd/sd"]["throughput_tok_s"]
    s = report["summaries"]
    assert ratio == pytest.approx(s["psd"]["throughput_tok_s"] / s["sd"]["throughput_tok_s"])
    assert {p.name for p in folder.iterdir()} == {"compare.json", "scenario.toml", "ar", "sd", "psd", MARKER}


def test_compare_marks_methods_that_do_not_fit(capsys):
    # co-located Qwen3-8B's weights on top of the KV that vLLM V0 sizes without them overflow the L40S
    assert main(["compare", *FAST, "--set", "draft=qwen3-8b", "--set", "gpu_memory_utilization=0.7",
                 "--json", "--no-write"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["summaries"]["sd"]["fits"] is False
    assert report["summaries"]["psd"]["fits"] is True
    assert "psd/sd" not in report["ratios"]


def test_scenario_command_prints_loadable_toml(capsys, tmp_path):
    assert main(["scenario", "--set", "k=6"]) == 0
    text = capsys.readouterr().out
    f = tmp_path / "s.toml"
    f.write_text(text)
    assert main(["scenario", str(f)]) == 0
    assert "k = 6" in capsys.readouterr().out


def test_catalog_lists_entries(capsys):
    assert main(["catalog"]) == 0
    out = capsys.readouterr().out
    assert "l40s" in out and "qwen3-32b" in out and "nvlink4" in out
    assert main(["catalog", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["models"]["qwen3-32b"]["source"]


def test_python_dash_m_works():
    proc = subprocess.run([sys.executable, "-m", "psdsim", "run", *FAST, "--json", "--no-write"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["method"] == "psd"


def test_console_script_bad_input_has_no_traceback():
    proc = subprocess.run([sys.executable, "-m", "psdsim", "run", "--set", "k=-1"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stdout == ""
