"""The simulated timeline as Chrome trace-event JSON (`psdsim run --trace`, sim/timeline.py)."""

from __future__ import annotations

import json
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from psdsim.cli import main
from psdsim.sim.layout import layout_for
from psdsim.sim.output.timeline import trace_document
from psdsim.sim.run import Result, simulate
from tests.helpers.scenarios import small

TIGHT_KV = dict(prompt_len=96, m=8, max_model_len=256, num_gpu_blocks_override=40, preemption_mode="swap")
V1 = dict(scheduler="vllm-v1", max_num_batched_tokens=128, rate=20.0)
CASES = {
    "ar": dict(method="ar"),
    "sd": dict(method="sd"),
    "sd-2m": dict(method="sd-2m"),
    "sd-5gpu": dict(method="sd-5gpu"),
    "psd": dict(method="psd"),
    "psd+tetris": dict(method="psd+tetris", extra=1),
    "psd-ring": dict(method="psd", sub_batches=3, drafters=2),
    "pearl": dict(method="pearl"),
    "psd-swap": dict(method="psd", **TIGHT_KV),
    "sd-swap": dict(method="sd", **TIGHT_KV),
    "psd-v1": dict(method="psd", **V1),
    "psd-ring-v1": dict(method="psd", sub_batches=3, drafters=2, **V1),
}
US = 1e6


def scenario(case: str):
    return small(requests=30, output_len=24, **CASES[case])


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[Result, dict]]:
    """Each case simulated once with a timeline; the document as a viewer would read it."""
    out = {}
    for case in CASES:
        r = simulate(scenario(case), timeline=True)
        out[case] = (r, json.loads(json.dumps(trace_document(r), allow_nan=False)))
    return out


def slices(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X"]


def tracks(doc: dict) -> dict[str, int]:
    return {e["args"]["name"]: e["tid"] for e in doc["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name"}


def on_track(doc: dict, prefix: str) -> list[dict]:
    tids = {tid for name, tid in tracks(doc).items() if name.startswith(prefix)}
    return [e for e in slices(doc) if e["tid"] in tids]


@pytest.mark.parametrize("case", CASES)
def test_document_is_trace_event_json(runs, case):
    r, doc = runs[case]
    assert set(doc) == {"traceEvents", "displayTimeUnit", "otherData"} and doc["displayTimeUnit"] == "ms"
    other = doc["otherData"]
    assert other["scenario"] == r.scenario.name and other["method"] == r.scenario.method
    assert isinstance(other["psdsim_version"], str) and other["notes"]
    assert {e["ph"] for e in doc["traceEvents"]} == {"M", "X", "C"}
    for e in doc["traceEvents"]:
        assert isinstance(e["name"], str) and e["pid"] == 1 and isinstance(e["args"], dict)
        if e["ph"] == "M":
            assert e["name"] in {"process_name", "thread_name", "thread_sort_index"}
        elif e["ph"] == "X":
            assert isinstance(e["tid"], int) and isinstance(e["cat"], str)
            assert isinstance(e["ts"], float) and isinstance(e["dur"], float)
            assert e["ts"] >= 0 and e["dur"] > 0 and isinstance(e["args"]["step"], int)
        else:
            assert isinstance(e["ts"], float)
            assert all(isinstance(v, int) for v in e["args"].values())
    named = set(tracks(doc).values())
    assert {e["tid"] for e in slices(doc)} == named  # every slice is on a named track


def test_expected_tracks(runs):
    psd = tracks(runs["psd"][1])
    assert {"engine steps", "driver (engine loop)", "drafter GPU", "verifier (target, TP=4)",
            "link → verifier (inputs)", "link → drafter (sampler output)"} <= psd.keys()
    sd = tracks(runs["sd"][1])
    assert {"drafter (on verifier GPU 0)", "verifier (target, TP=4)"} <= sd.keys()
    assert not any(name.startswith("link") for name in sd)  # co-located: nothing crosses a link
    ar = tracks(runs["ar"][1])
    assert "verifier (target, TP=4)" in ar and not any("drafter" in name for name in ar)
    ring = tracks(runs["psd-ring"][1])
    assert {"drafter GPU 0", "drafter GPU 1"} <= ring.keys() and "drafter GPU" not in ring


def test_slice_names_say_what_they_are(runs):
    doc = runs["psd"][1]
    names = {e["name"] for e in slices(doc)}
    assert {"draft B0", "draft B1", "verify B0", "verify B1", "prefill", "prefill (draft)",
            "broadcast inputs", "sampler output", "rejection sampling", "overhead",
            "decode step", "prefill step"} <= names
    assert "swap KV" in {e["name"] for e in slices(runs["psd-swap"][1])}
    assert "draft ahead" in {e["name"] for e in slices(runs["pearl"][1])}


@pytest.mark.parametrize("case", CASES)
def test_no_overlapping_slices_on_a_track(runs, case):
    by_track = defaultdict(list)
    for e in slices(runs[case][1]):
        by_track[e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_track.values():
        spans.sort()
        for (_, end), (start, _) in pairwise(spans):
            assert start >= end - 1e-6  # µs; float rounding of ts + dur only


@pytest.mark.parametrize("case", CASES)
def test_slices_account_for_the_run(runs, case):
    r, doc = runs[case]
    s = r.summary
    makespan_us = s["makespan_s"] * US
    xs = slices(doc)
    verify = sum(e["dur"] for e in xs if e["cat"] == "verifier")
    assert verify / makespan_us == pytest.approx(s["verifier_busy"], rel=1e-9)
    if s["drafter_busy"] is not None:
        gpus = max(1, layout_for(r.scenario).drafter_gpus)
        drafter = sum(e["dur"] for e in xs if e["cat"] == "drafter")
        assert drafter / makespan_us / gpus == pytest.approx(s["drafter_busy"], rel=1e-9)
    link = sum(e["dur"] for e in xs if e["cat"] == "link")
    assert link / US == pytest.approx(r.steps["comm_s"].sum(), rel=1e-9, abs=1e-12)
    swap = sum(e["dur"] for e in xs if e["name"] == "swap KV")
    assert swap / US == pytest.approx(s["swap_s"], rel=1e-9, abs=1e-12)
    assert max(e["ts"] + e["dur"] for e in xs) == pytest.approx(makespan_us, rel=1e-12)
    steps = [e for e in xs if e["cat"] == "step"]
    assert len(steps) == len(r.steps["kind"])
    assert all(e["args"]["step"] < len(steps) for e in xs)


def test_swaps_and_transfers_happen(runs):
    assert runs["psd-swap"][0].summary["swap_s"] > 0 and runs["sd-swap"][0].summary["swap_s"] > 0
    assert runs["psd-ring"][0].summary["parallelization_rate"] > 0


@pytest.mark.parametrize("case", ["psd", "psd-ring", "pearl", "sd", "ar"])
def test_slices_carry_their_facts(runs, case):
    r, doc = runs[case]
    verifies = [e for e in slices(doc) if e["cat"] == "verifier" and e["name"] != "prefill"]
    assert verifies
    for e in verifies:
        args = e["args"]
        assert {"step", "batch", "scored", "accepted", "generated"} <= args.keys()
        assert args["batch"] > 0 and args["generated"] > 0 and args["scored"] >= args["batch"]
        if case != "ar":
            assert args["k"] == r.scenario.k
        if case.startswith("psd"):
            assert e["name"] == f"verify B{args['sub_batch']}"
    assert sum(e["args"]["accepted"] for e in verifies) == r.steps["accepted"].sum()
    for e in slices(doc):
        if e["cat"] == "link":
            assert e["args"]["bytes"] > 0
        if e["name"].startswith("draft"):
            assert e["args"]["batch"] > 0 and e["args"]["k"] == r.scenario.k


@pytest.mark.parametrize("case", CASES)
def test_recording_changes_nothing(runs, case):
    recorded = runs[case][0]
    plain = simulate(scenario(case))
    assert plain.timeline is None
    assert json.dumps(plain.summary) == json.dumps(recorded.summary)
    for a, b in ((plain.steps, recorded.steps), (plain.requests, recorded.requests)):
        for key in a:
            assert np.array_equal(a[key], b[key], equal_nan=a[key].dtype.kind == "f"), key


def test_a_run_without_a_timeline_has_no_document():
    with pytest.raises(ValueError, match="timeline=True"):
        trace_document(simulate(small(requests=4, output_len=4)))


FAST = ["--set", "requests=20", "--set", "output_len=16", "--no-write"]


def test_cli_writes_the_trace(tmp_path, capsys):
    path = tmp_path / "t.json"
    assert main(["run", *FAST, "--trace", str(path)]) == 0
    assert "timeline: " in capsys.readouterr().out
    doc = json.loads(path.read_text())
    assert doc["otherData"]["method"] == "psd" and slices(doc)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".t.json.psdsim.json", "t.json"]  # no temporary


@pytest.mark.parametrize("where", ["/nonexistent/dir/x.json", "blocker/x.json"])
def test_cli_bad_trace_path_is_one_line_exit_2(tmp_path, capsys, monkeypatch, where):
    if Path(where).is_absolute() and Path(where).parent.exists():
        pytest.skip("that folder exists on this machine")
    monkeypatch.chdir(tmp_path)
    Path("blocker").write_text("a file, not a folder")
    assert main(["run", *FAST, "--trace", where]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("psdsim: error: --trace: ") and "fix:" in err


def test_cli_writes_no_trace_for_a_run_that_does_not_fit(tmp_path, capsys):
    path = tmp_path / "t.json"
    args = ["run", "--set", "target=llama-3.3-70b", "--set", "draft=llama-3.1-8b", "--trace", str(path)]
    assert main(args) == 2
    assert not path.exists()


@pytest.mark.parametrize("method", ["sd", "psd"])
def test_adaptive_k_slices_carry_the_k_drafted(method):
    """With k_policy = adaptive and poor drafts, steps draft fewer than k tokens (SD: none); the
    verify slices say how many were scored per request, not the scenario's k."""
    r = simulate(small(requests=30, output_len=24, method=method, k=6, acceptance=0.1,
                       k_policy="adaptive"), timeline=True)
    doc = json.loads(json.dumps(trace_document(r)))
    verifies = [e for e in slices(doc) if e["cat"] == "verifier" and e["name"] != "prefill"]
    assert verifies
    for e in verifies:
        args = e["args"]
        assert args["k"] < 6 and args["scored"] <= args["batch"] * (args["k"] + 1)
