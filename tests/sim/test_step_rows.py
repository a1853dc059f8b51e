"""A run packs its step rows into column arrays every CHUNK_ROWS rows (moved to disk past
SPILL_ROWS) and folds its verification log into per-request totals every LOG_FOLD steps (bounded
memory); the step and request tables must be what they were without, whatever the chunking."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from psdsim.sim import records, requests, spill
from psdsim.sim.records import STEP_COLUMNS, StepRows, step_table
from psdsim.sim.run import simulate
from tests.helpers.scenarios import small


def _whole(rows: list[tuple]) -> dict[str, np.ndarray]:
    return {name: np.array(col) for name, col in zip(STEP_COLUMNS, zip(*rows, strict=True), strict=True)}


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert list(a) == list(b)
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        assert a[name].tolist() == b[name].tolist() or np.array_equal(a[name], b[name], equal_nan=True), name


@pytest.mark.parametrize("method", ["psd", "sd", "ar", "pearl"])
def test_a_runs_tables_do_not_depend_on_the_chunking(monkeypatch, method):
    s = small(requests=30, method=method, k_policy="adaptive" if method == "sd" else "fixed")
    monkeypatch.setattr(records, "CHUNK_ROWS", 10**9)
    monkeypatch.setattr(requests, "LOG_FOLD", 10**9)
    whole = simulate(s)
    monkeypatch.setattr(records, "CHUNK_ROWS", 7)
    monkeypatch.setattr(requests, "LOG_FOLD", 5)
    cut = simulate(s)
    _same(cut.steps, whole.steps)
    _same(cut.requests, whole.requests)
    assert cut.summary == whole.summary


@pytest.mark.parametrize("spill_rows", [10**9, 1], ids=["in memory", "spilled"])
def test_parts_of_different_dtypes_join_as_one_array_would(monkeypatch, spill_rows):
    """None in one part and ints in another (an object column, which stays in memory when the
    rest spills), bools beside ints, ints beside floats, strings of different widths (a narrow
    part first: a spilled file is converted)."""
    monkeypatch.setattr(records, "CHUNK_ROWS", 2)
    monkeypatch.setattr(records, "SPILL_ROWS", spill_rows)
    monkeypatch.setattr(spill, "BLOCK_ROWS", 3)
    base = [0] * len(STEP_COLUMNS)
    variants = [("decode", 1, True, 1), ("decode", None, True, 1), ("prefill", 3, False, 2.5),
                ("decode", 4, 1, 3), ("decode", None, 0, 4), ("prefill", 5, True, 5.0), ("decode", 6, 2, 6)]
    rows = []
    for kind, batch0, parallelised, start in variants:
        row = list(base)
        row[STEP_COLUMNS.index("kind")] = kind
        row[STEP_COLUMNS.index("batch0")] = batch0
        row[STEP_COLUMNS.index("parallelised")] = parallelised
        row[STEP_COLUMNS.index("start_s")] = start
        rows.append(tuple(row))
    packed = StepRows()
    for r in rows:
        packed.append(r)
    table = step_table(packed)
    _same(table, _whole(rows))
    mapped = {name for name, values in table.items() if isinstance(values.base, memoryview)}
    assert mapped == (set(STEP_COLUMNS) - {"batch0"} if spill_rows == 1 else set())
    assert step_table(StepRows())["kind"].size == 0


def test_a_misspelt_step_record_field_is_refused():
    """The record is slotted: a field set under a wrong name fails where it is set instead of
    leaving its column at the default."""
    with pytest.raises(AttributeError):
        records.StepRecord().verfied = 3


def test_the_step_columns_are_the_declared_fields_less_those_marked_not_a_column():
    names = [f.name for f in dataclasses.fields(records.StepRecord)]
    assert "drafter_s" in names and "drafter_s" not in STEP_COLUMNS
    assert list(STEP_COLUMNS) == [n for n in names if n != "drafter_s"]
    assert STEP_COLUMNS[:3] == ("kind", "start_s", "end_s")
