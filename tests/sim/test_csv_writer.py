"""table_csv writes column by column and must give, byte for byte, what the row-by-row
csv.writer it replaced gave. The reference below is that writer, kept as the specification."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from psdsim.sim.output.csv_table import table_csv
from psdsim.sim.run import simulate
from tests.helpers.scenarios import reference_csv, small


def test_a_runs_tables_are_byte_identical():
    r = simulate(small(requests=60, method="psd"))
    for table in (r.steps, r.requests):
        assert table_csv(table) == reference_csv(table)


def test_numeric_edge_values():
    cols = {"f": np.array([0.0, -0.0, 0.0, np.nan, np.inf, -np.inf, 1e16, 1e-5, 5e-324, 0.1]),
            "g": np.array([0.5] * 9 + [np.nan]), "h": np.array([-0.0] * 10),
            "i": np.arange(-5, 5, dtype=np.int32), "b": np.arange(10) % 3 == 0,
            "s": np.array(["a", "b,c", 'q"t', "", "x\ny", "z", " ", "r\r", "é", "ok"])}
    assert table_csv(cols) == reference_csv(cols)


_objects = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                     st.text(alphabet=st.characters(codec="utf-8"), max_size=8))


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 4).flatmap(lambda ncols: st.lists(
    st.lists(_objects, min_size=ncols, max_size=ncols), min_size=0, max_size=12).map(
        lambda rows, ncols=ncols: (ncols, rows))))
def test_object_columns_as_csv_writer_wrote_them(shape):
    ncols, rows = shape
    cols = {f"c{j}": np.array([row[j] for row in rows] + [None], dtype=object)[:-1] for j in range(ncols)}
    assert table_csv(cols) == reference_csv(cols)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=40),
       st.integers(1, 5))
def test_float_columns_with_repeats(values, repeat):
    col = {"x": np.array(values * repeat, dtype=np.float64)}
    assert table_csv(col) == reference_csv(col)
