"""sim/numbers.isum: the exact integer sum the hot path uses in place of ndarray.sum()."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from psdsim.sim.numbers import SMALL, isum


@given(st.lists(st.integers(-(2**40), 2**40), max_size=3 * SMALL))
def test_isum_is_numpy_sum_on_both_sides_of_the_cutoff(values):
    a = np.array(values, dtype=np.int64)
    total = isum(a)
    assert type(total) is int and total == int(a.sum())


@given(st.lists(st.booleans(), max_size=2 * SMALL))
def test_isum_counts_bools(values):
    assert isum(np.array(values, dtype=bool)) == sum(values)
