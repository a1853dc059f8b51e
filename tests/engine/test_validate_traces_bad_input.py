"""`psdsim validate --traces` on bad trace content: one line on stderr naming the user's trace (its
file and line) where a record is at fault, exit code 2, no traceback, nothing written.

Each case spoils one field of the hand-built MineDraft run set (tests/engine/test_validate_traces.py): a
request's lengths or times, a step's batched_requests or is_prompt_run, the counts and timings
calibration needs, the GPU traces of a calibration folder, the acceptance a k needs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from psdsim.cli import main
from tests.helpers.traces import write_minedraft

NAN, INF = float("nan"), float("inf")
Edit = Callable[[dict[str, Any]], None]


def _records(folder: Path, kind: str, edit: Edit, first_only: bool = False) -> Path:
    """Apply `edit` to the folder's `kind` records (every one, or the first of the first measured
    bundle); returns the JSONL, written back as MineDraft's tracer writes it (NaN as NaN)."""
    (path,) = folder.glob("*.jsonl")
    bundles = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    chosen = [r for b in (bundles[1:2] if first_only else bundles) for r in b["traces"] if r["type"] == kind]
    for rec in chosen[:1] if first_only else chosen:
        edit(rec)
    path.write_text("".join(json.dumps(b) + "\n" for b in bundles), encoding="utf-8")
    return path


def _set(**values: Any) -> Edit:
    return lambda rec: rec.update(values)


def _spec(**values: Any) -> Edit:
    """Set on the speculative steps only (those with verify_len)."""
    return lambda rec: rec.update(values) if "verify_len" in rec else None


def _refused(capsys: pytest.CaptureFixture[str], *folders: str, names: str = "") -> str:
    """Run validate on the folders: exit 2, one stderr line, no traceback, no report folder."""
    code = main(["validate", "--traces", *folders, "--out", "out"])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("psdsim: error: "), err
    assert "Traceback" not in err and names in lines[0], lines[0]
    assert not Path("out").exists()
    return lines[0]


@pytest.fixture
def runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    monkeypatch.chdir(tmp_path)
    return write_minedraft(Path("sd"), "sd"), write_minedraft(Path("psd"), "psd")


RECORDS = {   # case: (kind, edit, first record only, what the line says)
    # V1: request fields the report and the simulated request list are computed from
    "prompt_len_nan": ("Request", _set(prompt_len=NAN), False, "prompt_len is nan"),
    "prompt_len_inf": ("Request", _set(prompt_len=INF), False, "prompt_len is inf"),
    "prompt_len_word": ("Request", _set(prompt_len="eight"), False, "prompt_len is 'eight'"),
    "prompt_len_list": ("Request", _set(prompt_len=[8]), False, "prompt_len is [8]"),
    "prompt_len_fraction": ("Request", _set(prompt_len=8.7), False, "not a whole number"),
    "gen_len_nan": ("Request", _set(gen_len=NAN), False, "gen_len is nan"),
    "gen_len_zero": ("Request", _set(gen_len=0), False, "gen_len is 0"),
    "gen_len_negative": ("Request", _set(gen_len=-3), False, "gen_len is -3"),
    "no_start_us": ("Request", lambda r: r.pop("start_us"), True, "no start_us"),
    "start_us_word": ("Request", _set(start_us="soon"), True, "start_us is 'soon'"),
    "start_us_nan": ("Request", _set(start_us=NAN), True, "start_us is nan"),
    # V2, V3: step fields the measured metrics read
    "batched_int": ("Step", _set(batched_requests=5), False, "batched_requests is a int"),
    "is_prompt_run_word": ("Step", _set(is_prompt_run="yes"), False, "is_prompt_run is 'yes'"),
    "batched_null_every_step": ("Step", _set(batched_requests=None), False, "no decode step"),
    # V7: what calibration cannot use
    "zero_durations": ("Step", lambda r: r.update(end_us=r["start_us"]), False, "took no time"),
    "accepted_over_verified": ("Step", _spec(accepted_num=1000), False, "accepted_num 1000 exceeds"),
    "verify_len_zero": ("Step", _spec(verify_len=0), False, "exceeds verify_len 0"),
    # V8: request times
    "end_before_start": ("Request", lambda r: r.update(end_us=r["start_us"] - 1e6), False, "ends before"),
    "zero_length_requests": ("Request", lambda r: r.update(end_us=r["start_us"]), False, "took no time ("),
    "one_us_requests": ("Request", lambda r: r.update(end_us=r["start_us"] + 1), False,
                        "the request lasted 1 us (end_us - start_us) but the decode steps that ran it took"),
    "end_us_nan": ("Request", _set(end_us=NAN), True, "end_us is nan"),
    "end_us_inf": ("Request", _set(end_us=INF), True, "end_us is inf"),
}


@pytest.mark.parametrize("case", RECORDS)
def test_a_bad_record_is_named_by_file_and_line(capsys, runs, case):
    kind, edit, first_only, says = RECORDS[case]
    sd, psd = runs
    path = _records(sd, kind, edit, first_only)
    line = _refused(capsys, str(sd), str(psd), names=says)
    assert f"{path} line " in line


def test_a_manifest_that_is_a_pipe_is_said_to_be_one(capsys, runs):
    sd, psd = runs
    (psd / "manifest.toml").unlink()
    os.mkfifo(psd / "manifest.toml")
    line = _refused(capsys, str(sd), str(psd), names="psdsim: error: --traces: ")
    assert "manifest.toml' is not a regular file (a pipe, socket or device)" in line


def test_psd_run_whose_decode_steps_took_no_time(capsys, runs):
    sd, psd = runs   # not a calibration run: calibrate never reads it, the measured throughput would
    path = _records(psd, "Step", lambda r: r.update(end_us=r["start_us"]))
    assert f"{path} line 2: every decode step took no time" in _refused(capsys, str(sd), str(psd))


def test_all_measured_times_zero(capsys, runs):
    sd, psd = runs
    path = _records(sd, "Step", lambda r: r.update({k: 0.0 for k in r if k.startswith("measured_")}))
    _refused(capsys, str(sd), str(psd), names=str(path))


def test_a_request_longer_than_max_model_len_names_the_manifest(capsys, runs):
    sd, psd = runs   # prompt_len = 0: the trace's prompts, which the simulator's request file would refuse
    text = (psd / "manifest.toml").read_text(encoding="utf-8").replace("prompt_len = 8", "prompt_len = 0")
    (psd / "manifest.toml").write_text(text + "\n[engine]\nmax_model_len = 300\n", encoding="utf-8")
    _records(psd, "Request", _set(prompt_len=295))
    line = _refused(capsys, str(sd), str(psd), names=f"{psd / 'manifest.toml'}: max_model_len")
    assert "295 prompt + 9 output tokens" in line


@pytest.mark.parametrize("name, content, says", [
    ("prof.json.gz", b"\x1f\x8b" + b"garbage" * 10, "gzip"),
    ("run.sqlite", b"SQLite format 3\x00" + b"\x00" * 100, "nsys"),
    ("k.json", b'{"traceEvents": []}', "no events"),
])
def test_a_calibration_folders_bad_gpu_trace(capsys, runs, name, content, says):
    sd, psd = runs
    (sd / name).write_bytes(content)
    line = _refused(capsys, str(sd), str(psd), names=str(sd / name))
    assert says in line


def test_a_k_no_calibration_run_measured(capsys, runs):
    sd, _ = runs   # after the profile is fitted (progress lines): still one line on stderr
    psd = write_minedraft(Path("psd3"), "psd", k=3)
    text = (psd / "manifest.toml").read_text(encoding="utf-8").replace("k = 2", "k = 3")
    (psd / "manifest.toml").write_text(text, encoding="utf-8")
    _refused(capsys, str(sd), str(psd), names=f"{psd / 'manifest.toml'}: acceptance")


def test_a_proposed_len_no_run_may_have_is_not_suggested_as_k(capsys, runs):
    """A proposed_len of 10**7 is a corrupt trace, not a k to set (k is at most 32)."""
    sd, psd = runs
    _records(sd, "Step", _spec(proposed_len=10**7))
    line = _refused(capsys, str(sd), str(psd), names="propose 10000000 tokens")
    assert "set k = 10000000" not in line and "check them" in line


@pytest.mark.parametrize("edit", [_spec(measured_target_time=0.0), _spec(generated_num=10**6)],
                         ids=["target_time_zero", "generated_huge"])
def test_spoiled_sd_steps_are_blamed_not_a_missing_calibration_run(capsys, runs, edit):
    sd, psd = runs   # the SD run at k is there: its steps are what is wrong
    _records(sd, "Step", edit)
    line = _refused(capsys, str(sd), str(psd), names="give no usable acceptance")
    assert "no calibration run measured" not in line and "add an SD run" not in line
