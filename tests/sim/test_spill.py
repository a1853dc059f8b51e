"""A long run's step table moves to disk (sim/records.py, sim/spill.py): spilled or not,
a run gives the same summary, step table and CSV bytes; nothing is left on disk however the run
ends; reading a spilled table keeps its pages released; summarize() holds a few bytes a step."""

from __future__ import annotations

import errno
import gc
import io
import os
import tempfile
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from psdsim.cli import main
from psdsim.sim import footprint, records, run, spill
from psdsim.sim.output import csv_table
from psdsim.sim.output.csv_table import table_csv
from psdsim.sim.run import simulate
from tests.helpers.scenarios import cases, small

LINUX = Path("/proc/self/fd").is_dir()


def _spill_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pack every 7 rows, spill past 10, read 5 rows at a time, write CSV 3 rows at a time: every
    boundary a long run meets, in a small one."""
    monkeypatch.setattr(records, "CHUNK_ROWS", 7)
    monkeypatch.setattr(records, "SPILL_ROWS", 10)
    monkeypatch.setattr(spill, "BLOCK_ROWS", 5)
    monkeypatch.setattr(csv_table, "CSV_BLOCK_ROWS", 3)


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert list(a) == list(b)
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        assert a[name].tolist() == b[name].tolist() or np.array_equal(a[name], b[name], equal_nan=True), name


def _mapped(values: np.ndarray) -> bool:
    return isinstance(values.base, memoryview)


@pytest.mark.parametrize("name", sorted(cases()))
def test_a_spilled_run_is_the_unspilled_run_bit_for_bit(monkeypatch, name):
    scenario, cost = cases()[name]
    whole = simulate(scenario, cost=cost() if cost else None)
    assert not any(_mapped(v) for v in whole.steps.values())
    _spill_everything(monkeypatch)
    cut = simulate(scenario, cost=cost() if cost else None)
    assert all(_mapped(v) for v in cut.steps.values())   # every column went to disk
    assert cut.summary == whole.summary
    _same(cut.steps, whole.steps)
    _same(cut.requests, whole.requests)
    assert table_csv(cut.steps) == table_csv(whole.steps)


def _open_in(folder: Path) -> list[str]:
    """This process's open files under `folder` (deleted or not)."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(folder)):
            found.append(target)
    return found


@pytest.mark.skipif(not LINUX, reason="reads /proc/self/fd")
def test_nothing_is_left_on_disk_after_a_run_or_an_interrupted_one(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    _spill_everything(monkeypatch)
    monkeypatch.setattr(run, "PROGRESS_EVERY", 20)
    seen: list[tuple[list[str], list[str]]] = []

    def watch(_fraction: float) -> None:
        seen.append((os.listdir(tmp_path), _open_in(tmp_path)))

    s = small(requests=30)
    result = simulate(s, progress=watch)
    assert seen and all(names == [] for names, _ in seen)        # never a name on disk
    assert any(files for _, files in seen)                       # yet it did spill there
    assert all(_mapped(v) for v in result.steps.values()) and os.listdir(tmp_path) == []

    def interrupt(_fraction: float) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        simulate(s, progress=interrupt)
    assert os.listdir(tmp_path) == []
    del result
    gc.collect()
    assert _open_in(tmp_path) == []     # and once dropped, its files are gone from the disk too


def _rss() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))


@pytest.mark.skipif(not LINUX, reason="reads /proc/self/status")
def test_reading_a_spilled_column_in_blocks_keeps_its_pages_released():
    file = spill.SpillFile()
    for i in range(8):
        file.append(np.arange(1 << 20, dtype=np.float64) + i)   # 64 MB on disk
    column = file.array()
    before = _rss()
    total = sum(float(block["x"].sum()) for block in spill.blocks({"x": column}, ["x"]))
    assert _rss() - before < column.nbytes / 8
    assert total == float(column.sum())   # the same values; read whole, the pages stay resident:
    assert _rss() - before > column.nbytes * 3 / 4


def test_summarize_holds_a_few_bytes_a_step_of_a_spilled_table(monkeypatch):
    """The steps columns of a spilled run are on disk; summarize() gathers one selected column at
    a time (8 bytes a step) beside two masks (a byte each), not whole-table temporaries."""
    monkeypatch.setattr(records, "SPILL_ROWS", 1000)
    monkeypatch.setattr(spill, "BLOCK_ROWS", 512)
    peaks: list[tuple[int, int]] = []
    summarize = run.summarize

    def measured(s, steps, requests, **kw):
        tracemalloc.start()
        try:
            summary = summarize(s, steps, requests, **kw)
            peaks.append((tracemalloc.get_traced_memory()[1], len(steps["kind"])))
        finally:
            tracemalloc.stop()
        return summary

    monkeypatch.setattr(run, "summarize", measured)
    simulate(small(requests=100, output_len=512, m=2, prompt_len=16))
    peak, steps = peaks[0]
    assert steps > 10_000
    assert peak < 12 * steps + 200_000, (peak, steps)


class _FillingDisk(io.FileIO):
    """A temporary file on a disk that fills after its first `room` bytes (ENOSPC)."""

    room = 64

    def write(self, data) -> int:
        if self.tell() + len(memoryview(data).cast("B")) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(data)


def _on_a_filling_disk(tmp_path: Path):
    def make(**_kwargs):
        fd, name = tempfile.mkstemp(dir=tmp_path)
        os.close(fd)
        raw = _FillingDisk(name, "r+")
        os.unlink(name)
        return io.BufferedRandom(raw)

    return make


def test_a_temporary_disk_that_fills_while_spilling_is_one_line_naming_tmpdir(monkeypatch, tmp_path, capsys):
    """Exit 2 with the fix, not a traceback; nothing left on the disk."""
    _spill_everything(monkeypatch)
    monkeypatch.setattr(footprint, "available_disk_bytes", lambda: None)   # past the up-front check
    monkeypatch.setattr(spill.tempfile, "TemporaryFile", _on_a_filling_disk(tmp_path))
    code = main(["run", "--set", "requests=30", "--set", "m=4", "--set", "output_len=32",
                 "--set", "prompt_len=64", "--no-write"])
    gc.collect()
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("psdsim: error: TMPDIR: cannot write the run's temporary tables in ")
    assert "(No space left on device); fix: set TMPDIR to a folder on a disk with room" in err
    assert len(err.splitlines()) == 1, err
    assert os.listdir(tmp_path) == []
