"""Results folders are complete or absent; tables read back exactly."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from psdsim.sim.output.own_files import MARKER
from psdsim.sim.output.results import write_folder, write_result
from psdsim.sim.run import simulate
from tests.helpers.scenarios import small


def test_tables_round_trip(tmp_path):
    r = simulate(small(requests=10))
    folder = write_result(r, tmp_path / "out")
    with (folder / "requests.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 10
    assert [float(x["finish_s"]) for x in rows] == r.requests["finish_s"].tolist()
    with (folder / "steps.csv").open() as fh:
        steps = list(csv.DictReader(fh))
    assert len(steps) == len(r.steps["kind"])
    assert {s["kind"] for s in steps} == {"prefill", "decode"}


def test_replacing_an_existing_folder(tmp_path):
    out = tmp_path / "out"
    write_folder(out, {"a.txt": "one"}, "run")
    write_folder(out, {"b.txt": "two"}, "run")
    assert sorted(p.name for p in out.iterdir()) == [MARKER, "b.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary leftovers


def test_a_failed_write_leaves_nothing(tmp_path):
    out = tmp_path / "out"
    bad_table = {"x": np.array([1, 2]), "y": np.array([1])}  # ragged: fails while writing
    with pytest.raises(ValueError):
        write_folder(out, {"ok.txt": "fine", "t.csv": bad_table}, "run")
    assert list(tmp_path.iterdir()) == []
