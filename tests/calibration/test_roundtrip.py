"""The calibration loop end to end: simulate with a known cost model, export the run as an nsys
export, calibrate, simulate again with the fitted profile; and `psdsim calibrate` itself."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from psdsim.calibration.calibrate import calibrate, detect_format
from psdsim.calibration.synthetic import CostLog, NsysWriter, write_cost_trace
from psdsim.calibration.trace_error import TraceError
from psdsim.cli import main
from psdsim.sim.costs import AnalyticCost
from psdsim.sim.output.atomic_writes import write_file
from psdsim.sim.run import simulate
from psdsim.sim.scenario import catalog_for, load_scenario

SMALL = ["requests=160", "output_len=128"]


@pytest.fixture(scope="module")
def run_and_trace(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """A PSD run priced by the analytic model, and its cost queries as a noisy nsys export
    (2% timing noise, 1% of the work stalled to 3x)."""
    s = load_scenario(overrides=SMALL)
    log = CostLog(AnalyticCost(s, catalog_for(s)))
    truth = simulate(s, cost=log).summary
    path = tmp_path_factory.mktemp("rt") / "run.sqlite"
    write_cost_trace(log.calls, path, rng=np.random.default_rng(7), noise=0.02, outliers=0.01)
    return truth, path


def test_round_trip_recovers_throughput_within_two_percent(run_and_trace: tuple[dict, Path],
                                                           tmp_path: Path) -> None:
    truth, trace = run_and_trace
    cal = calibrate([trace], source={"gpu": "l40s", "target": "qwen3-32b"})
    assert set(cal.fits) == {"draft", "verify", "prefill", "draft_prefill", "comm", "broadcast", "reject",
                             "overhead"}
    for name in ("draft", "verify", "comm", "broadcast", "reject", "overhead"):
        assert cal.fits[name].term.cv_mape < 0.03, name       # 2% noise, stalls rejected
        assert cal.fits[name].term.dropped.get("outlier (residual > 5 robust sigma and > 2%)", 0) > 0
    profile = write_file(tmp_path / "profile.json", cal.profile.to_json())
    s = load_scenario(overrides=[*SMALL, f"profile={profile}"])
    fitted = simulate(s).summary
    for key in ("throughput_tok_s", "output_tok_s"):
        assert fitted[key] == pytest.approx(truth[key], rel=0.02), key
    assert not any("no fitted" in w for w in fitted["warnings"])


def test_the_profile_records_its_inputs_and_is_deterministic(run_and_trace: tuple[dict, Path]) -> None:
    _, trace = run_and_trace
    a = calibrate([trace], source={"engine": "psdsim-sim", "gpu": "l40s"})
    b = calibrate([trace], source={"engine": "psdsim-sim", "gpu": "l40s"})
    assert a.profile.to_json() == b.profile.to_json()
    src = a.profile.source
    (info,) = src["traces"]
    assert info["format"] == "nsys" and len(info["sha256"]) == 64 and info["bytes"] == trace.stat().st_size
    assert src["engine"] == "psdsim-sim" and src["gpu"] == "l40s" and src["timing"] == "busy"
    assert info["gpus"]["0"] == "NVIDIA L40S"
    assert a.profile.terms["verify"].ranges["batch"][1] <= 16


def test_cli_calibrate_writes_profile_figure_and_samples(run_and_trace: tuple[dict, Path], tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    _, trace = run_and_trace
    out, fig, csv = tmp_path / "p.json", tmp_path / "fit.png", tmp_path / "samples.csv"
    assert main(["calibrate", str(trace), "--out", str(out), "--plot", str(fig), "--samples", str(csv),
                 "--gpu", "l40s"]) == 0
    text = capsys.readouterr().out
    for word in ("draft", "verify", "MAPE", "CV MAPE", "dropped samples:", "outlier", "psdsim run --profile"):
        assert word in text
    assert json.loads(out.read_text())["format"] == "psdsim-profile"
    assert fig.read_bytes()[:4] == b"\x89PNG"
    assert csv.read_text().splitlines()[0].startswith("kind,start_s,end_s,duration_s")
    assert main(["run", "--profile", str(out), "--set", "requests=20", "--set", "output_len=16", "--json",
                 "--no-write"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["throughput_tok_s"] > 0


def test_cli_bad_traces_exit_2_with_one_line_and_write_nothing(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "p.json"
    cases = {"notes.txt": b"just some text\n", "empty.sqlite": b"", "trace.json": b'{"foo": 1}\n{"bar": 2}',
             "cut.json": b'{"traceEvents": [{"ph": "X", "na'}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        assert main(["calibrate", str(tmp_path / name), "--out", str(out)]) == 2, name
        err = capsys.readouterr().err
        assert err.startswith("psdsim: error:") and err.count("\n") == 1, (name, err)
        assert "Traceback" not in err
    assert main(["calibrate", str(tmp_path / "missing.sqlite"), "--out", str(out)]) == 2
    assert "not found" in capsys.readouterr().err
    assert main(["calibrate", str(tmp_path / "notes.txt"), "--range", "nonsense"]) == 2
    assert "KIND=REGEX" in capsys.readouterr().err
    assert not out.exists()


def test_formats_are_told_apart_by_content(tmp_path: Path) -> None:
    with NsysWriter(tmp_path / "a.bin"):
        pass
    (tmp_path / "b.bin").write_bytes(gzip.compress(b'{"traceEvents": []}'))
    (tmp_path / "c.bin").write_text('{\n  "traceEvents": []\n}')
    (tmp_path / "d.bin").write_text('{"metadata": {}, "traces": []}\n')
    assert [detect_format(tmp_path / f"{c}.bin") for c in "abcd"] == ["nsys", "kineto", "kineto", "minedraft"]
    # one long line each: a MineDraft bundle, and a compact Kineto trace with its events late
    steps = [{"tid": f"Step:{i}", "type": "Step", "start_us": i} for i in range(400)]
    (tmp_path / "f.bin").write_text(json.dumps({"metadata": {"x": 1}, "traces": steps}) + "\n")
    (tmp_path / "g.bin").write_text(json.dumps({"deviceProperties": [{}] * 3000, "traceEvents": []}))
    assert detect_format(tmp_path / "f.bin") == "minedraft" and detect_format(tmp_path / "g.bin") == "kineto"
    with pytest.raises(TraceError, match="empty file"):
        (tmp_path / "e.bin").write_text("  \n")
        detect_format(tmp_path / "e.bin")
