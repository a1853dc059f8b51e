"""Traces that are wrong in ways a parser meets rarely but a user's file can hold: numbers beyond a
float, JSON nested past the recursion limit, SQLite columns holding text where nsys writes
integers, counts that contradict each other, a pipe where a file should be. Each ends as the
CLI's contract says: exit code 2 and one line `psdsim: error: WHERE: problem; fix: what to do`
(or a profile whose every number is finite), no traceback, no profile written on failure.

The cases come from fuzzing `psdsim calibrate` (376 malformed inputs); each of these once ended
in a traceback, a hang, a garbled error line or a NaN in the profile.
"""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from psdsim.calibration.kineto import GZIP_FLOOR_BYTES, gunzip_bounded
from psdsim.calibration.synthetic import GpuOp, NsysWriter, NvtxRange
from psdsim.calibration.trace_error import TraceError
from psdsim.cli import main
from tests.helpers.traces import KinetoTrace, kineto_trace, minedraft_records

BIG = "1" + "0" * 400   # a JSON integer no float holds


def nsys(tmp: Path, *sql: str) -> Path:
    """Twelve verify ranges with two kernels each, then `sql` run on the export."""
    path = tmp / "t.sqlite"
    with NsysWriter(path, gpus={0: "NVIDIA H200"}) as w:
        now = 1_000_000
        for i in range(12):
            tokens, ctx = 16 * (i + 1), 1000 + 300 * i
            dur = 20_000 + 500 * tokens + 3 * ctx
            ops = [GpuOp(now + 500, now + 500 + dur, device=0)]   # times in ns
            name = f"psdsim:verify batch=8 tokens={tokens} ctx={ctx}"
            w.add_range(NvtxRange(name, now, now + 800, ops=ops))
            now += dur + 5000
    con = sqlite3.connect(path)
    for statement in sql:
        con.execute(statement)
    con.commit()
    con.close()
    return path


def text_file(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def minedraft(tmp: Path, edit: Callable[[list[dict]], object] = lambda records: None,
              text: Callable[[str], str] = lambda s: s) -> Path:
    """tests/calibration/test_minedraft's three iterations, one bare record a line, edited."""
    records = [r for _ in range(3) for r in minedraft_records()]
    edit(records)
    lines = "\n".join(json.dumps({k: v for k, v in r.items() if k != "type"}) for r in records)
    path = tmp / "t.jsonl"
    path.write_text(text(lines) + "\n")
    return path


def _steps(records: list[dict]) -> list[dict]:
    return [r for r in records if r["tid"].startswith("Step") and "proposed_len" in r]


def _set(key: str, value: object, only_first: bool = False) -> Callable[[list[dict]], None]:
    def edit(records: list[dict]) -> None:
        for r in _steps(records)[:1] if only_first else _steps(records):
            r[key] = value
    return edit


# (case, how to make the trace, words the error line holds; None: it may also calibrate)
CASES: dict[str, tuple[Callable[[Path], Path], str | None]] = {
    "kineto: a kernel duration of 400 digits": (
        lambda d: text_file(d / "t.json",
                            kineto_trace(d).read_text().replace('"dur": 10.0', f'"dur": {BIG}', 1)),
        None),
    "kineto: one line nested 100000 deep": (
        lambda d: text_file(d / "t.json", '{"x": ' + "[" * 100000 + "]" * 100000 + "}"), "not JSON"),
    "kineto: a range attribute of 1e999": (lambda d: kineto_trace(d, " ctx2=1e999"), None),
    "kineto: no drafts proposed (k=0)": (lambda d: kineto_trace(d, " k=0 accepted=0"), None),
    "kineto: more accepted than proposed": (lambda d: kineto_trace(d, " k=1 accepted=1000"),
                                            "accepted more drafts"),
    "minedraft: a time of 400 digits": (
        lambda d: minedraft(d, _set("measured_target_time", "BIG"), lambda s: s.replace('"BIG"', BIG)),
        "not a finite number"),
    "minedraft: a prompt length of 400 digits": (
        lambda d: minedraft(d, lambda rs: [r.update(prompt_len="BIG") for r in rs if "prompt_len" in r],
                            lambda s: s.replace('"BIG"', BIG)), None),
    "minedraft: a number of 5000 digits": (
        lambda d: minedraft(d, text=lambda s: s + '\n{"start_us": ' + "1" * 5000 + "}"), "not JSON"),
    "minedraft: a line nested 100000 deep": (
        lambda d: minedraft(d, text=lambda s: s + '\n{"start_us": ' + "[" * 100000 + "]" * 100000 + "}"),
        "not JSON"),
    "minedraft: a time of 1e308": (lambda d: minedraft(d, _set("measured_target_time", 1e308, True)), None),
    "minedraft: a time that is true": (lambda d: minedraft(d, _set("measured_target_time", True)),
                                       "not a finite number"),
    "minedraft: no drafts proposed": (
        lambda d: minedraft(d, lambda rs: (_set("verify_len", 0)(rs), _set("proposed_len", 0)(rs))), None),
    "minedraft: more accepted than proposed": (
        lambda d: minedraft(d, lambda rs: [r.update(accepted_num=1000, generated_num=1004)
                                           for r in _steps(rs)]),
        "accepted more drafts"),
    "kineto: a proposal of 1e18 drafts (hung the per-token rate)": (
        lambda d: kineto_trace(d, " k=1000000000000000000 accepted=1"),
        "more than 32 draft tokens a request"),
    "minedraft: a proposed_len of 2**63 (hung the per-token rate)": (
        lambda d: minedraft(d, _set("proposed_len", 2**63)), "more than 32 draft tokens a request"),
    "nsys: a range of 1e300 tokens (a profile psdsim refuses was written)": (
        lambda d: nsys(d, "UPDATE NVTX_EVENTS SET text = replace(text, 'tokens=32 ', 'tokens=1e300 ')"),
        "the profile it would write: terms.verify.ranges.tokens[1]: 1e+300 is outside [0, 1e+15], from the "
        "verify sample at t.sqlite:psdsim:verify batch=8 tokens=1e300"),
    "nsys: a kernel that started before the epoch (an hour per pass)": (
        lambda d: nsys(d, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = -(1 << 62) WHERE rowid = 1"),
        "the profile it would write: terms.verify.coef[0]"),
    "nsys: an event type id that is text": (
        lambda d: nsys(d, "DROP TABLE ENUM_NSYS_EVENT_TYPE",
                       "CREATE TABLE ENUM_NSYS_EVENT_TYPE (id, name, label)",
                       "INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES ('abc', 'NvtxPushPopRange', 'x')"),
        "ENUM_NSYS_EVENT_TYPE.id holds text"),
    "nsys: a thread id that is text": (lambda d: nsys(d, "UPDATE NVTX_EVENTS SET globalTid = 'thread-x'"),
                                      "NVTX_EVENTS.globalTid holds text"),
    "nsys: a range name stored as bytes": (
        lambda d: nsys(d, "UPDATE NVTX_EVENTS SET text = CAST(text AS BLOB)"), "NVTX_EVENTS.text holds blob"),
    "nsys: a kernel end that is text": (
        lambda d: nsys(d, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET \"end\" = 'later' WHERE rowid % 3 = 1"),
        'CUPTI_ACTIVITY_KIND_KERNEL.end holds text'),
    "nsys: a device id that is text": (
        lambda d: nsys(d, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 'gpu0' WHERE rowid % 2 = 0"),
        "deviceId holds text"),
    "nsys: a GPU id that is NULL": (
        lambda d: nsys(d, "INSERT INTO TARGET_INFO_GPU (vmId, id, name) VALUES (0, NULL, 'x')"),
        "TARGET_INFO_GPU.id holds null"),
}


def _finite_profile(path: Path) -> None:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in the profile")
    json.loads(path.read_text(), parse_constant=refuse)


@pytest.mark.parametrize("case", list(CASES))
def test_a_hostile_trace_is_one_line_or_a_finite_profile(case, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make, words = CASES[case]
    trace = make(tmp_path)
    code = main(["calibrate", str(trace), "--out", "p.json"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    if code == 0 and words is None:
        _finite_profile(tmp_path / "p.json")
        return
    assert code == 2, (case, err)
    assert err.count("\n") == 1 and err.startswith("psdsim: error: ") and "; fix: " in err, err
    assert words is None or words in err, err
    assert not (tmp_path / "p.json").exists()


def test_a_path_holding_separators_is_not_taken_apart(tmp_path, capsys):
    odd = tmp_path / "a: b; c.json"
    odd.write_text("just some text\n")
    assert main(["calibrate", str(odd), "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"psdsim: error: {odd}: not a trace psdsim reads") and err.count("\n") == 1


@pytest.mark.parametrize(("rule", "words"), [("verify=(", "bad regular expression"),
                                             ("verify", "is not KIND=REGEX"), ("nokind=x", "unknown kind")])
def test_a_bad_range_rule_names_the_flag_and_its_own_fix(tmp_path, capsys, rule, words):
    argv = ["calibrate", str(kineto_trace(tmp_path)), "--range", rule, "--out", str(tmp_path / "p.json")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("psdsim: error: --range: ") and words in err
    assert "give a trace" not in err     # the fix is the rule's, not the trace's


def test_too_few_samples_says_what_was_read_and_what_to_do(tmp_path, capsys):
    t = KinetoTrace()
    t.annotate("psdsim:verify batch=8 tokens=16 ctx=100", 0.0, 10.0)
    t.launch(1.0, 12.0, 30.0)
    assert main(["calibrate", str(t.write(tmp_path / "t.json")), "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("psdsim: error: traces: no term had enough samples to fit (read 1 verify")
    assert "; fix: record more steps" in err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_pipe_is_refused_not_read_forever(tmp_path):
    fifo = tmp_path / "t.jsonl"
    os.mkfifo(fifo)
    argv = [sys.executable, "-m", "psdsim", "calibrate", str(fifo), "--out", str(tmp_path / "p.json")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "not a regular file" in done.stderr and done.stderr.count("\n") == 1


def _spaces_gz(path: Path, mib: int) -> Path:
    """A gzip bomb: `mib` MiB of spaces, deflated a MiB at a time (about 1 KiB each)."""
    deflate = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    with path.open("wb") as out:
        for _ in range(mib):
            out.write(deflate.compress(b" " * 2**20))
        out.write(deflate.flush())
    return path


def test_a_gzip_bomb_is_refused_before_it_fills_memory(tmp_path):
    bomb = _spaces_gz(tmp_path / "bomb.json.gz", 8)
    limit = 200 * bomb.stat().st_size   # the ratio bounds it: the floor is below
    with pytest.raises(TraceError, match=f"decompresses to more than {limit:,} bytes, 200x its size"):
        gunzip_bounded(bomb.read_bytes(), bomb, floor=2**20)


def test_a_gzip_bomb_past_the_floor_is_one_line_through_the_cli(tmp_path, capsys):
    bomb = _spaces_gz(tmp_path / "bomb.json.gz", GZIP_FLOOR_BYTES // 2**20 + 1)
    assert main(["calibrate", str(bomb), "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"psdsim: error: {bomb}: decompresses to more than {GZIP_FLOOR_BYTES:,} bytes")
    assert err.count("\n") == 1 and "gunzip it first" in err and not (tmp_path / "p.json").exists()


def test_a_gzip_file_within_the_bound_reads_whole_members_and_all(tmp_path):
    """`cat a.gz b.gz` is one valid gzip file of two members; a member ends mid-chunk."""
    text = b'{"traceEvents": [' + b" " * (3 * 2**20 + 17) + b"]}"
    both = gzip.compress(text[:1000]) + gzip.compress(text[1000:])
    assert gunzip_bounded(both, tmp_path / "t.json.gz") == text
    with pytest.raises(TraceError, match="corrupt or truncated gzip file"):
        gunzip_bounded(both[:-30], tmp_path / "t.json.gz")


def test_a_profile_every_run_of_the_named_hardware_refuses_is_not_written(tmp_path, capsys):
    """Microsecond passes of Qwen3-32B on 4 L40S (the weights alone take 18.5 ms to read) once
    wrote a profile and a `use it` command that exits 2; without --gpu/--target/--tp nothing
    names the hardware, and the profile is written."""
    trace, out = kineto_trace(tmp_path), tmp_path / "p.json"
    named = ["--gpu", "l40s", "--target", "qwen3-32b", "--tp", "4"]
    assert main(["calibrate", str(trace), "--out", str(out), *named]) == 2
    err = capsys.readouterr().err
    assert err.startswith("psdsim: error: traces: the fitted profile: prices a verify pass at "), err
    assert "over 10x below it" in err and err.count("\n") == 1 and not out.exists()
    assert main(["calibrate", str(trace), "--out", str(out)]) == 0 and out.exists()
