"""`psdsim validate --traces RUN_DIR…`: a real run set's own traces against the simulator.

- The reference engine's traces (MineDraft's format plus psdsim's fields) validated from their
  folders alone give what `validate --engine reference` gives on the same measurements: the same
  profiles, the same predictions (needs PyTorch; skipped without it).
- A hand-built MineDraft trace set (MineDraft's fields only) whose measured metrics are known by
  construction; the gate and the JUnit file on it.
- Malformed folders: one line, exit 2, nothing written.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from psdsim.cli import main
from psdsim.engine.validate.gate import check, parse_max_errors
from psdsim.sim.errors import ScenarioError
from tests.helpers.traces import (
    ACCEPT,
    EXTRA,
    OUT_LEN,
    PREFILL_US,
    PROMPT,
    PSD_INIT_US,
    PSD_US,
    SD_US,
    VERIFIES,
    K,
    M,
    write_minedraft,
)

HAVE_TORCH = importlib.util.find_spec("torch") is not None


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


# -- a hand-built MineDraft run set ----------------------------------------------------------


@pytest.fixture(scope="module")
def handbuilt(tmp_path_factory):
    root = tmp_path_factory.mktemp("handbuilt")
    sd, psd = write_minedraft(root / "sd", "sd"), write_minedraft(root / "psd", "psd")
    code, stdout, err = _run(["validate", "--traces", str(sd), str(psd), "--out", str(root / "out"),
                              "--json"])
    assert code == 0, err
    return root, json.loads(stdout)


def test_measured_metrics_are_minedrafts_own(handbuilt):
    _, report = handbuilt
    rows = {r["run"]: r for r in report["rows"]}
    assert set(rows) == {"sd_k2", "psd_k2"}
    sd, psd = rows["sd_k2"]["metrics"], rows["psd_k2"]["metrics"]
    # SD: VERIFIES steps of SD_US, each emitting (ACCEPT + 1) tokens for each of M requests
    assert sd["throughput_tok_s"]["measured"] == pytest.approx((ACCEPT + 1) * M / (SD_US * 1e-6))
    sd_latency = (100 + PREFILL_US + VERIFIES * SD_US) * 1e-3
    assert sd["latency_ms.p50"]["measured"] == pytest.approx(sd_latency)
    assert sd["e2el_ms"]["measured"] == pytest.approx(sd_latency / M)
    assert sd["vsr"]["measured"] == pytest.approx(ACCEPT / K)
    assert sd["parallelization_rate"]["measured"] == 0
    # PSD: 2 * VERIFIES steps of M verified requests, all but the first parallelised
    steps = 2 * VERIFIES
    decode_us = PSD_INIT_US + (steps - 1) * PSD_US
    assert psd["throughput_tok_s"]["measured"] == pytest.approx(steps * (ACCEPT + 1) * M / (decode_us * 1e-6))
    assert psd["parallelization_rate"]["measured"] == pytest.approx((steps - 1) / steps)
    makespan = (100 + PREFILL_US + decode_us) * 1e-3
    assert psd["e2el_ms"]["measured"] == pytest.approx(makespan / (2 * M))
    assert psd["latency_ms.p99"]["measured"] == pytest.approx(makespan, rel=0.01)
    # two measured iterations each (the warm-up bundle dropped): repeats, identical here
    assert sd["throughput_tok_s"]["repeats"] == pytest.approx([sd["throughput_tok_s"]["measured"]] * 2)
    assert report["runs"]["sd_k2"]["iterations"] == 2


def test_sd_calibrates_and_psd_is_predicted(handbuilt):
    root, report = handbuilt
    rows = {r["run"]: r for r in report["rows"]}
    assert rows["sd_k2"]["in_sample"] and not rows["psd_k2"]["in_sample"]
    assert report["engine"] == "traces" and report["schema"] == 1
    assert report["runs"]["psd_k2"]["calibration"] is False
    verify = report["profiles"]["profile.json"]["terms"]["verify"]
    assert verify["mape"] == pytest.approx(0, abs=1e-6)       # every SD pass took 5 ms
    assert verify["coef"][0] == pytest.approx(0.005, rel=1e-6)
    # the in-sample SD run is reproduced closely; its acceptance is the traces' (1 of 2 drafts)
    assert rows["sd_k2"]["metrics"]["throughput_tok_s"]["error"] == pytest.approx(0, abs=0.25)
    assert report["acceptance"]["per_k"]["2"]["mean_accepted"] == pytest.approx(ACCEPT)
    assert any("no fitted" in w for w in report["warnings"])   # MineDraft times no channel: said so
    for name in ("validate.json", "validate.png", "profile.json", "scenarios/psd_k2.toml",
                 "requests/psd_k2.jsonl"):
        assert (root / "out" / name).is_file(), name
    assert json.loads((root / "out" / "validate.json").read_text()) == report


def test_the_written_profile_keeps_each_terms_bootstrap(handbuilt):
    """validate puts its profiles together from several fits; each term keeps its own fit's
    bootstrap (or the count too few to resample), so --intervals draws its uncertainty."""
    root, _ = handbuilt
    doc = json.loads((root / "out" / "profile.json").read_text(encoding="utf-8"))
    boot = doc["bootstrap"]
    assert set(doc["terms"]) == set(boot["terms"]) | set(boot["too_few"])
    assert boot["terms"], "no term was bootstrapped"
    for name, vectors in boot["terms"].items():
        assert len(vectors) == 64 and all(len(v) == len(doc["terms"][name]["coef"]) for v in vectors)


def test_the_gate_exits_1_naming_the_worst_row_and_writes_junit(handbuilt, tmp_path):
    root, report = handbuilt
    worst = max((r for r in report["rows"] if not r["in_sample"]),
                key=lambda r: abs(r["metrics"]["throughput_tok_s"]["error"]))
    junit = tmp_path / "validate.xml"
    code, _, err = _run(["validate", "--traces", str(root / "sd"), str(root / "psd"),
                         "--out", str(tmp_path / "o"), "--max-error", "throughput=0.001",
                         "--junit", str(junit)])
    assert code == 1
    said = [line for line in err.splitlines() if line.startswith("psdsim:")]   # the rest is progress
    assert len(said) == 1 and said[0] == err.strip().splitlines()[-1]
    assert said[0].startswith("psdsim: gate missed: ") and f"{worst['run']} throughput_tok_s" in said[0]
    suite = ET.parse(junit).getroot()
    assert suite.get("name") == "psdsim validate"
    assert int(suite.get("tests")) == 2 * 6 and int(suite.get("failures")) == 1
    failed = [c for c in suite.iter("testcase") if c.find("failure") is not None]
    assert [(c.get("classname"), c.get("name")) for c in failed] == [
        (f"psdsim.validate.{worst['run']}", "throughput_tok_s")]
    code, _, err = _run(["validate", "--traces", str(root / "sd"), str(root / "psd"),
                         "--out", str(tmp_path / "p"), "--max-error", "throughput=1000",
                         "--max-error", "vsr=1000"])
    assert code == 0, err


def test_gate_rules():
    row = {"run": "psd_k3", "in_sample": False,
           "metrics": {"vsr": {"measured": 0.5, "predicted": 0.56, "error": 0.12},
                       "throughput_tok_s": {"measured": 100.0, "predicted": None, "error": None}}}
    ar = {"run": "ar", "in_sample": False,
          "metrics": {"vsr": {"measured": None, "predicted": None, "error": None},
                      "throughput_tok_s": {"measured": 9.0, "predicted": 9.0, "error": 0.0}}}
    g = check([row, ar], parse_max_errors(["vsr=10", "throughput_tok_s=5%"]))
    assert g["checked"] == 3 and not g["passed"]
    missed = [(m["run"], m["metric"]) for m in g["missed"]]
    assert missed == [("psd_k3", "throughput_tok_s"), ("psd_k3", "vsr")]   # no prediction is the worst
    assert check([{**row, "in_sample": True}], {"vsr": 0.1})["passed"]
    for bad in (["vsr"], ["nosuch=5"], ["vsr=-1"], ["vsr=x"]):
        with pytest.raises(ScenarioError, match="--max-error"):
            parse_max_errors(bad)


def test_tetris_and_sd_2m_runs_are_predicted_from_the_sd_calibration(tmp_path):
    """A TETRIS run (proposes K + EXTRA, scores K a verified request) and an sd-2m run (SD over
    2M requests) are held out: measured from their traces, simulated as psd+tetris and sd-2m."""
    runs = [write_minedraft(tmp_path / m, m) for m in ("sd", "psd+tetris", "sd-2m")]
    code, stdout, err = _run(["validate", "--traces", *map(str, runs), "--out", str(tmp_path / "o"),
                              "--json"])
    assert code == 0, err
    report = json.loads(stdout)
    rows = {r["run"]: r for r in report["rows"]}
    assert set(rows) == {"sd_k2", "psd+tetris_k2", "sd-2m_k2"}
    assert [n for n, r in rows.items() if r["in_sample"]] == ["sd_k2"]
    tetris, sd2m = rows["psd+tetris_k2"], rows["sd-2m_k2"]
    assert (tetris["sim_method"], tetris["k"], sd2m["sim_method"], sd2m["k"]) == ("psd+tetris", K, "sd-2m", K)
    # VSR on the scored drafts (K a request), not on the K + EXTRA proposed
    assert tetris["metrics"]["vsr"]["measured"] == pytest.approx(ACCEPT / K)
    steps = 2 * VERIFIES
    decode_us = PSD_INIT_US + (steps - 1) * PSD_US
    assert tetris["metrics"]["throughput_tok_s"]["measured"] == pytest.approx(
        steps * (ACCEPT + 1) * M / (decode_us * 1e-6))
    # sd-2m: VERIFIES steps of SD_US, each emitting (ACCEPT + 1) tokens for each of 2M requests
    assert sd2m["metrics"]["throughput_tok_s"]["measured"] == pytest.approx(
        (ACCEPT + 1) * 2 * M / (SD_US * 1e-6))
    for row in (tetris, sd2m):   # predicted, from the SD run's profile and acceptance at K
        assert all(row["metrics"][key]["predicted"] > 0 for key in ("throughput_tok_s", "e2el_ms", "vsr"))
    scenario = (tmp_path / "o" / "scenarios" / "psd+tetris_k2.toml").read_text(encoding="utf-8")
    assert f"extra = {EXTRA}" in scenario and 'method = "psd+tetris"' in scenario
    assert report["runs"]["sd-2m_k2"]["calibration"] is False
    assert report["predicted"]["sd-2m_k2"]["m"] == M


# -- malformed folders ------------------------------------------------------------------------


def _manifest(method: str, requests: int, extra: str, m: int = M) -> str:
    return (f'method = "{method}"\nk = {K}\nm = {m}\nrequests = {requests}\noutput_len = {OUT_LEN}\n'
            f"prompt_len = {PROMPT}\n{extra}")


def _two_k(folder: Path) -> None:
    write_minedraft(folder, "sd")
    other = write_minedraft(folder.parent / "tmp3", "sd", k=3)
    for p in other.glob("*.jsonl"):
        shutil.copy(p, folder / p.name.replace("k=3", "k=3b"))


@pytest.mark.parametrize(("make", "needle"), [
    (lambda d: write_minedraft(d, "sd").joinpath("manifest.toml").unlink(), "has no manifest.toml"),
    (lambda d: write_minedraft(d, "sd", k=3), "k: the manifest says 2, its traces propose 3"),
    (lambda d: write_minedraft(d, "sd", manifest='method = "sd"\nk = 2\nm = 1\nrequests = 2\noutput_len = 9\n'
                               'prompt_len = 8\n'), "m: the manifest says 1"),
    (lambda d: write_minedraft(d, "sd", manifest='method = "sd"\nk = 2\nm = 2\nrequests = 5\noutput_len = 9\n'
                               'prompt_len = 8\n'), "requests: the manifest asks 5 prompts"),
    (lambda d: write_minedraft(d, "sd", manifest='method = "sd"\nk = 2\nm = 2\nrequests = 2\noutput_len = 9\n'
                               'prompt_len = 30\n'), "prompt_len: the manifest says 30"),
    (_two_k, "holds traces of two different k"),
    (lambda d: write_minedraft(d, "psd"), "none of the 1 runs is a calibration run"),
    (lambda d: write_minedraft(d, "sd", calibration=False), "none of the 1 runs is a calibration run"),
    (lambda d: write_minedraft(d, "sd", manifest='method = "sd"\nk = 2\nm = 2\nnosuch = 1\n'), "nosuch"),
    (lambda d: write_minedraft(d, "psd+tetris", manifest=_manifest("psd+tetris", 4, "extra = 2\n")),
     "extra: the manifest drafts k + extra = 2 + 2 = 4 tokens per request, its traces propose 3"),
    (lambda d: write_minedraft(d, "sd-2m", manifest=_manifest("sd-2m", 4, "", m=1)),
     "m: the manifest says 1, which allows 2 requests a step"),
    (lambda d: write_minedraft(d, "sd-2m", manifest=_manifest("sd", 4, "")),
     "m: the manifest says 2, which allows 2 requests a step"),
])
def test_malformed_folders_are_one_line_and_exit_2(tmp_path, make, needle):
    run = tmp_path / "run"
    make(run)
    code, stdout, err = _run(["validate", "--traces", str(run), "--out", str(tmp_path / "out")])
    lines = err.strip().splitlines()
    assert code == 2 and stdout == ""
    assert len(lines) == 1 and lines[0].startswith("psdsim: error:") and needle in lines[0], lines
    assert not (tmp_path / "out").exists()


def test_traces_refuses_engine_flags_and_the_gate_needs_traces(tmp_path):
    run = write_minedraft(tmp_path / "sd", "sd")
    code, _, err = _run(["validate", "--traces", str(run), "--k", "1,2", "--out", str(tmp_path / "o")])
    assert code == 2 and "--k" in err and len(err.strip().splitlines()) == 1
    code, _, err = _run(["validate", "--max-error", "p50=8", "--out", str(tmp_path / "o")])
    assert code == 2 and err.startswith("psdsim: error: --max-error") and len(err.strip().splitlines()) == 1


# -- the reference engine's traces: the same answer as validate --engine reference --------------

SMALL = ["--k", "2", "--m", "2", "--requests", "6", "--output-len", "12", "--set", "prompt_len=8",
         "--set", "engine.prompt_len_max=16", "--set", "engine.warmup_passes=1", "--no-contention",
         "--methods", "psd"]


def trace_folders(validated: Path, root: Path) -> list[Path]:
    """One folder per engine run: its JSONL trace, the catalog and request list it ran, and a
    manifest: the scenario validate wrote for it, without the profile (the traces make it)."""
    folders = []
    for scen in sorted((validated / "scenarios").glob("*.toml")):
        run = root / scen.stem
        run.mkdir(parents=True)
        (trace,) = (validated / "traces" / scen.stem.split("_k")[0] / "r0").glob("*.jsonl")
        for src in (trace, validated / "catalog.toml", validated / "requests.jsonl"):
            shutil.copy(src, run / src.name)
        text = "\n".join(line for line in scen.read_text(encoding="utf-8").splitlines()
                         if not line.startswith("profile ="))
        text = text.replace(json.dumps(str(validated / "catalog.toml")), '"catalog.toml"')
        text = text.replace(json.dumps(str(validated / "requests.jsonl")), '"requests.jsonl"')
        (run / "manifest.toml").write_text(text + "\n", encoding="utf-8")
        folders.append(run)
    return folders


@pytest.mark.skipif(not HAVE_TORCH, reason="the reference engine needs PyTorch: pip install 'psdsim[engine]'")
def test_reference_traces_give_validates_answer(tmp_path):
    live = tmp_path / "live"
    code, stdout, err = _run(["validate", *SMALL, "--out", str(live), "--json"])
    assert code == 0, err
    engine = json.loads(stdout)
    folders = trace_folders(live, tmp_path / "runs")
    assert {f.name for f in folders} == {"ar", "sd_k2", "sd-2proc_k2", "psd_k2"}
    code, stdout, err = _run(["validate", "--traces", *map(str, folders), "--out", str(tmp_path / "t"),
                              "--json"])
    assert code == 0, err
    traced = json.loads(stdout)
    for name in ("profile.json", "profile-one-process.json", "profile-ar.json"):
        a, b = (json.loads((d / name).read_text(encoding="utf-8")) for d in (live, tmp_path / "t"))
        assert (a["terms"], a["acceptance"], a.get("contention")) == (
            b["terms"], b["acceptance"], b.get("contention"))
    assert traced["acceptance"]["spread"] == engine["acceptance"]["spread"]
    assert traced["predicted"] == engine["predicted"]               # the same predictions, exactly
    rows = {r["run"]: r for r in traced["rows"]}
    for row in engine["rows"]:
        mine = rows[row["run"]]
        assert mine["in_sample"] == row["in_sample"] and mine["sim_method"] == row["sim_method"]
        for key, cell in row["metrics"].items():   # measured from µs timestamps: equal to 1e-4
            got, want = mine["metrics"][key]["measured"], cell["measured"]
            assert got == (want if want is None else pytest.approx(want, rel=1e-4)), (row["run"], key)


def test_nsys_exports_join_their_own_runs_jsonl(tmp_path):
    """A calibration run's nsys export (MineDraft's `score` ranges, 4 ms of kernels each) is
    joined with that run's JSONL, run by run: two SD runs with exports starting at the same
    clock join 12 passes each, and the verify term is the kernels' time, not the JSONL timer's."""
    from psdsim.calibration.synthetic import GpuOp, NsysWriter, NvtxRange

    folders = []
    for name in ("sd-a", "sd-b"):
        run = write_minedraft(tmp_path / name, "sd")
        passes = 3 * VERIFIES                       # every bundle's speculative steps, warm-up included
        with NsysWriter(run / "profile.sqlite", gpus={0: "NVIDIA H100"}) as w:
            for i in range(passes):
                t = i * 20_000_000
                w.add_range(NvtxRange("score", t, t + 5_000_000, ops=[GpuOp(t + 100_000, t + 4_100_000)]))
        folders.append(run)
    folders.append(write_minedraft(tmp_path / "psd", "psd"))
    code, stdout, err = _run(["validate", "--traces", *map(str, folders), "--out", str(tmp_path / "o"),
                              "--json"])
    assert code == 0, err
    report = json.loads(stdout)
    assert {r["run"] for r in report["rows"]} == {"sd_k2@sd-a", "sd_k2@sd-b", "psd_k2"}
    verify = report["profiles"]["profile.json"]["terms"]["verify"]
    assert verify["samples"] == 2 * 3 * VERIFIES and verify["coef"][0] == pytest.approx(0.004, rel=1e-6)
    notes = json.loads((tmp_path / "o" / "profile.json").read_text(encoding="utf-8"))["notes"]
    assert sum(n.startswith(f"verify: joined {3 * VERIFIES} samples") for n in notes) == 2


def test_n_samples_of_a_prompt_are_one_request():
    """With n = 2, consecutive request records are one prompt's samples: E2EL divides by the
    prompts, a prompt's latency is its last sample's, TTFT its first's."""
    from psdsim.calibration.minedraft_records import Iteration
    from psdsim.engine.validate.measured import measured_summary
    from psdsim.sim.scenario import Scenario

    tids = ["R:0", "R:1", "R:2", "R:3"]
    steps = [{"start_us": 0, "end_us": 1000, "is_prompt_run": 4, "batched_requests": tids},
             {"start_us": 1000, "end_us": 3000, "is_prompt_run": 0, "batched_requests": tids,
              "generated_num": 4}]
    ends = [3000, 2000, 2500, 3000]
    reqs = [{"tid": t, "start_us": 0, "end_us": e, "prompt_len": 8, "gen_len": 2}
            for t, e in zip(tids, ends, strict=True)]
    s = Scenario(method="ar", n=2, requests=2, output_len=2, prompt_len=8)
    m = measured_summary(Iteration(1, steps, reqs), s)
    assert (m["requests"], m["sequences"]) == (2, 4)
    assert m["e2el_ms"] == pytest.approx(3.0 / 2)
    assert m["latency_ms"]["mean"] == pytest.approx(3.0)          # both prompts end with their last sample
    assert m["ttft_ms"]["mean"] == pytest.approx(1.0)             # the prompt step's end
    assert m["throughput_tok_s"] == pytest.approx(4 / 0.002)


def test_a_request_list_is_checked_against_the_records(tmp_path):
    run = write_minedraft(tmp_path / "sd", "sd", manifest=f"""
method = "sd"
k = {K}
m = {M}
requests = {M}
output_len = {OUT_LEN}
trace = "requests.jsonl"
""")
    rows = [{"arrival_s": 0.0, "prompt_tokens": PROMPT, "output_tokens": OUT_LEN}] * M
    (run / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert _run(["validate", "--traces", str(run), "--out", str(tmp_path / "ok")])[0] == 0
    rows[1] = {"arrival_s": 0.0, "prompt_tokens": PROMPT + 1, "output_tokens": OUT_LEN}
    (run / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    code, _, err = _run(["validate", "--traces", str(run), "--out", str(tmp_path / "bad")])
    assert code == 2 and "trace: request 1 of the request list has 9 prompt tokens" in err
    rows[1] = {"arrival_s": 2.0, "prompt_tokens": PROMPT, "output_tokens": OUT_LEN}
    (run / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    code, _, err = _run(["validate", "--traces", str(run), "--out", str(tmp_path / "late")])
    assert code == 2 and "arrives at 2 s" in err
