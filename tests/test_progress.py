"""The progress bar (issue #14): on stderr, only for work that has run ~2 s, only on a terminal,
never with --json."""

from __future__ import annotations

import io

from psdsim.commands import common
from psdsim.commands.common import PROGRESS_AFTER_S, Progress


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


def test_off_with_json_or_without_a_terminal(monkeypatch):
    _clock(monkeypatch, [0.0, 10.0, 0.0, 10.0])
    for enabled, stream in ((False, _Terminal()), (True, io.StringIO())):   # --json; a pipe
        Progress(enabled, stream)("psd", 0.5)
        assert stream.getvalue() == ""
