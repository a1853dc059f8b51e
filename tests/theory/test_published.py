"""The published constants, and the model's disagreement with the published statement."""

from __future__ import annotations

import pytest

from psdsim.theory.published import (
    A0,
    RATIO_AT_A0_ALGEBRA,
    SHARE_AT_A0_ALGEBRA,
    max_ratio_numeric,
    paper_ratio,
    peak,
    ratio_at_least,
    statement_vs_model,
)


def test_constants():
    assert pytest.approx(1.678347, abs=1e-6) == A0
    assert pytest.approx(1.5958, abs=1e-4) == RATIO_AT_A0_ALGEBRA
    assert pytest.approx(0.3734, abs=1e-4) == SHARE_AT_A0_ALGEBRA
    assert pytest.approx(2 * (1 + A0), rel=1e-12) == __import__("math").exp(A0)


@pytest.mark.parametrize("a, r", [(0.25, 1.67), (0.5, 1.86), (1.0, 1.99), (1.256, 2.00), (1.678, 1.98),
                                  (2.0, 1.95), (3.0, 1.82), (5.0, 1.61), (10.0, 1.36)])
def test_ratio_table_of_the_reference(a, r):
    """reference/paper.md §3.3's table of R(alpha V), to its printed precision."""
    assert round(paper_ratio(a), 2) == r


def test_peak_is_exactly_two_and_the_ceiling_holds():
    pk = peak()
    assert pk.ratio == pytest.approx(2.0, abs=1e-12)
    assert pk.a == pytest.approx(1.2564, abs=1e-4)
    assert max_ratio_numeric() == pytest.approx(2.0, abs=1e-9)


def test_range_where_the_published_bound_holds_in_the_model():
    lo, hi = ratio_at_least(1.59)
    assert paper_ratio(lo) == pytest.approx(1.59, abs=1e-9)
    assert paper_ratio(hi) == pytest.approx(1.59, abs=1e-9)
    assert lo < A0 < hi
    assert paper_ratio(hi * 1.5) < 1.59  # the published statement fails beyond hi
    text = " ".join(statement_vs_model())
    assert "not 1.59" in text and f"{hi:.4f}" in text
