"""Long work says what it takes: an estimate before it starts and, once it has run
~2 s, progress on stderr (a bar on a terminal, a plain line now and then in a log), never with
--json; short work prints nothing new; results that cannot fit on their disk are refused."""

from __future__ import annotations

import errno
import io
import json
import re
import shutil
import sys
from collections import namedtuple

import pytest

from psdsim.cli import main
from psdsim.commands import common
from psdsim.commands.common import PROGRESS_AFTER_S, Progress
from psdsim.sim import footprint

SMALL_RUN = ["run", "--set", "requests=300", "--set", "output_len=16", "--set", "prompt_len=32",
             "--set", "m=4"]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _clock(monkeypatch, times):
    it = iter(times)
    monkeypatch.setattr(common.time, "perf_counter", lambda: next(it))


def test_short_work_prints_nothing(monkeypatch):
    _clock(monkeypatch, [0.0, 0.5, 1.0, 1.5])
    out = _Terminal()
    bar = Progress(True, out)
    for f in (0.2, 0.6, 1.0):
        bar("psd", f)
    assert out.getvalue() == ""


def test_long_work_draws_a_bar_that_ends_the_line(monkeypatch):
    _clock(monkeypatch, [0.0, PROGRESS_AFTER_S + 1, PROGRESS_AFTER_S + 2, PROGRESS_AFTER_S + 3])
    out = _Terminal()
    bar = Progress(True, out)
    bar("psd", 0.5)
    bar("psd", 0.75)
    bar("psd", 1.0)
    text = out.getvalue()
    assert text.startswith("\r  psd [") and "50.0%" in text and "s left" in text
    assert text.endswith("\n") and text.count("\n") == 1 and "100.0%" in text


def test_off_with_json(monkeypatch):
    _clock(monkeypatch, [0.0, 10.0])
    for stream in (_Terminal(), io.StringIO()):
        Progress(False, stream)("psd", 0.5)
        assert stream.getvalue() == ""


def test_off_a_terminal_a_plain_line_every_tenth_with_counts_and_time_left(monkeypatch):
    """A log gets ~11 lines for 100 reports, no carriage return, and the time left from the pace."""
    _clock(monkeypatch, [0.0, *(float(i) for i in range(1, 101))])
    out = io.StringIO()
    bar = Progress(True, out, total=1000, unit="requests", after_s=0.5)
    for i in range(1, 101):
        bar("psd", i / 100)
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and 10 <= len(lines) <= 12
    assert lines[1] == "  psd: 11% 110/1,000 requests, 11 s elapsed, about 89 s left"
    assert lines[-1] == "  psd: 100% 1,000/1,000 requests, 100 s elapsed"


def test_a_log_gets_a_line_each_minute_of_slow_work(monkeypatch):
    _clock(monkeypatch, [0.0, 3.0, 70.0, 80.0, 140.0])
    out = io.StringIO()
    bar = Progress(True, out)
    for f in (0.01, 0.02, 0.03, 0.04):
        bar("grid", f)
    shown = [line.split(":")[1].split("%")[0].strip() for line in out.getvalue().splitlines()]
    assert shown == ["1", "2", "4"]


def _short_run(tmp_path, capsys, *extra):
    assert main([*SMALL_RUN, "--out", str(tmp_path / "r"), *extra]) == 0
    return capsys.readouterr()


def test_short_runs_print_nothing_on_stderr(tmp_path, capsys):
    assert _short_run(tmp_path, capsys).err == ""
    assert main([*SMALL_RUN, "--no-write", "--json"]) == 0
    assert capsys.readouterr().err == ""


def test_long_work_announces_its_estimate_then_logs_its_progress(tmp_path, capsys, monkeypatch):
    """Thresholds lowered so a small run counts as long: an estimate first, then progress lines."""
    monkeypatch.setattr(common, "LONG_WORK_S", 0.0)
    monkeypatch.setattr(common, "PROGRESS_AFTER_S", 0.0)
    err = _short_run(tmp_path, capsys).err.splitlines()
    assert re.fullmatch(r"psdsim: 300 requests: about \d+ s of simulation \(a rough estimate, within a "
                        r"factor of a few\); Ctrl-C stops it", err[0]), err[0]
    assert len(err) >= 2 and all(re.fullmatch(r"  psd: \d+% [\d,]+/300 requests, \d+ s elapsed.*", e)
                                 for e in err[1:]), err
    assert err[-1].startswith("  psd: 100% 300/300 requests")


class _FullDisk(io.StringIO):
    """A stderr on a full disk (`2>/dev/full`, a log whose disk filled): every write fails."""

    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("stderr", [_FullDisk(), None], ids=["full", "closed"])
def test_a_stderr_that_cannot_be_written_does_not_stop_the_run(stderr, tmp_path, capsys, monkeypatch):
    """The estimate and the progress lines are dropped; the run finishes and writes its results."""
    monkeypatch.setattr(common, "LONG_WORK_S", 0.0)
    monkeypatch.setattr(common, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(sys, "stderr", stderr)
    assert main([*SMALL_RUN, "--out", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "steps.csv").is_file()
    assert sys.stderr is stderr   # given back as it was


def test_json_stays_clean_of_the_estimate_and_the_progress(capsys, monkeypatch):
    monkeypatch.setattr(common, "LONG_WORK_S", 0.0)
    monkeypatch.setattr(common, "PROGRESS_AFTER_S", 0.0)
    assert main([*SMALL_RUN, "--no-write", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["fits"] and captured.err.startswith("psdsim: 300 requests: about")
    assert len(captured.err.splitlines()) == 1   # the estimate; no progress with --json


def test_results_bigger_than_the_free_disk_are_refused_before_the_run(tmp_path, capsys, monkeypatch):
    """One line naming requests, the size and the free space; nothing written; --no-write runs."""
    usage = namedtuple("usage", "total used free")
    seen = []

    def disk_usage(path):
        seen.append(path)
        return usage(10**12, 10**12 - 10**4, 10**4)   # 10 kB free

    monkeypatch.setattr(shutil, "disk_usage", disk_usage)
    monkeypatch.setattr(footprint, "available_disk_bytes", lambda: None)   # the temporary disk: fine
    out = tmp_path / "new" / "r"
    assert main([*SMALL_RUN, "--out", str(out)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("psdsim: error: requests: the results would take up to")
    assert "has 10.0 kB free" in err[0] and "--no-write" in err[0] and not (tmp_path / "new").exists()
    # the file system the results land on: the first parent that exists (the lock beside the
    # results makes new/ while the command runs, and removes it when nothing was written)
    assert seen and all(path in (tmp_path, tmp_path / "new") for path in seen)
    assert main([*SMALL_RUN, "--no-write"]) == 0


def test_compare_counts_every_method_against_the_disk(tmp_path, capsys, monkeypatch):
    from psdsim.sim.scenario import load_scenario

    s = load_scenario(None, [a for a in SMALL_RUN[1:] if a != "--set"])
    one = footprint.results_bytes(s)
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 0, 2 * one))
    assert main(["compare", *SMALL_RUN[1:], "--methods", "sd,psd", "--out", str(tmp_path / "c")]) == 0
    assert main(["compare", *SMALL_RUN[1:], "--out", str(tmp_path / "d")]) == 2   # three methods
    assert "the results would take up to" in capsys.readouterr().err


def test_paper_refuses_repeats_that_would_take_weeks(capsys):
    assert main(["paper", "--quick", "--repeats", "1000000", "--out", "/nonexistent/never"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("psdsim: error: --repeats: must be <= 100, got 1,000,000")


def test_durations_read_at_a_glance():
    assert [common.duration(x) for x in (45, 300, 3 * 3600 + 1800, 21 * 86400)] == \
        ["45 s", "5 min", "3.5 h", "21.0 days"]


def test_results_on_the_temporary_disk_count_the_tables_the_run_still_holds(tmp_path, monkeypatch):
    """While results are written the spilled tables still hold their temporary disk: on the same
    file system both must fit, on another only the results."""
    import tempfile

    from psdsim.sim.errors import ScenarioError

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**12, 0, 1000))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))   # the temporary folder: this disk
    footprint.check_results_disk(600, tmp_path / "r", "requests", "fix")   # no tables spilled
    with pytest.raises(ScenarioError) as err:
        footprint.check_results_disk(600, tmp_path / "r", "requests", "fix", spilled=600)
    assert "temporary tables" in err.value.problem and err.value.field == "requests"
    monkeypatch.setattr(footprint, "_shares_temporary_disk", lambda path: False)
    footprint.check_results_disk(600, tmp_path / "r", "requests", "fix", spilled=600)
