"""The decoupled drafter service through the commands (run, compare, sweep, plan) and in what a
run leaves behind: steps.csv's service columns and the timeline's replica tracks."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from psdsim.cli import main
from psdsim.sim.output.timeline import trace_document
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario

FAST = ["--set", "requests=12", "--set", "output_len=16", "--set", "m=4", "--set", "prompt_len=32"]
SERVICE_COLUMNS = ("replica", "drafts_prepared", "drafts_missed", "drafts_wasted", "drafter_queue_s")


def test_run_writes_the_service_columns_in_steps_csv(tmp_path: Path) -> None:
    out = tmp_path / "r"
    args = ["--method", "decoupled", "--set", "service_verifiers=3", "--out", str(out)]
    assert main(["run", *FAST, *args]) == 0
    with (out / "steps.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert set(SERVICE_COLUMNS) <= set(rows[0])
    assert {row["replica"] for row in rows} == {"0", "1", "2"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["method"] == "decoupled" and summary["gpus"] == 3 * 4 + 1


def test_compare_sweep_and_plan_take_the_method(tmp_path: Path, capsys) -> None:
    assert main(["compare", *FAST, "--methods", "sd,psd,decoupled", "--no-write"]) == 0
    assert "decoupled/psd" in capsys.readouterr().out
    spec = tmp_path / "sweep.toml"
    spec.write_text('[base]\nrequests = 8\noutput_len = 8\nmethod = "decoupled"\n'
                    "[grid]\nservice_branches = [1, 2]\n")
    assert main(["sweep", str(spec), "--out", str(tmp_path / "sw")]) == 0
    with (tmp_path / "sw" / "results.csv").open() as f:
        assert [row["status"] for row in csv.DictReader(f)] == ["ok", "ok"]
    plan = tmp_path / "plan.toml"
    plan.write_text('[base]\nrequests = 24\noutput_len = 16\n[space]\nmethod = ["sd", "decoupled"]\n'
                    "service_verifiers = [1, 2]\n[slo]\nlatency_p99_ms = 60000\n[search]\ntolerance = 0.3\n")
    assert main(["plan", str(plan), "--out", str(tmp_path / "pl"), "--workers", "1"]) == 0
    report = json.loads((tmp_path / "pl" / "plan.json").read_text())
    judged = sorted(v["config"]["service_verifiers"] for v in report["verdicts"]
                    if v["method"] == "decoupled")
    assert judged == [1, 2]   # each against its SD twin
    gpus = {r["service_verifiers"]: r["gpus"] for r in report["rows"] if r["method"] == "decoupled"}
    assert gpus == {1: 5, 2: 9}


def test_the_timeline_has_a_verifier_track_per_replica_and_the_services_work():
    s = Scenario(method="decoupled", requests=6, output_len=16, m=2, prompt_len=32, service_verifiers=2,
                 service_branches=1)
    r = simulate(s, timeline=True)
    doc = trace_document(r)
    names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    tracks = {v: k for k, v in names.items()}
    steps = r.steps
    for replica in (0, 1):
        track = tracks[f"verifier {replica} (target, TP=4)"]
        passes = [e for e in doc["traceEvents"] if e.get("tid") == track and e["ph"] == "X"]
        assert len(passes) == int(np.count_nonzero(steps["replica"] == replica))   # a pass a step
        assert all(steps["replica"][e["args"]["step"]] == replica for e in passes)
    redrafts = [e for e in doc["traceEvents"] if e["name"] == "draft (missed)"]
    assert len(redrafts) == int(np.count_nonzero(steps["drafts_missed"]))


def test_a_bad_service_field_is_one_line_and_exit_2(capsys) -> None:
    assert main(["run", "--method", "decoupled", "--set", "service_branches=9", "--no-write"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "service_branches" in err and "fix:" in err
