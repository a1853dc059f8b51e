"""A figure whose value is not zero never prints as zero: a tiny throughput, KV use or error
prints as the bound it lies below ("< 0.05"), an exact zero as zero (without a sign)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from psdsim.calibration.report import _pct as calibration_pct
from psdsim.engine.validate.report import format_error, format_value
from psdsim.sim.numbers import fixed, percent
from psdsim.sim.output import report


def test_a_nonzero_value_that_rounds_to_zero_prints_its_bound():
    assert fixed(0.01) == "< 0.05"
    assert fixed(-0.01) == "> -0.05"
    assert fixed(0.0004, 3) == "< 0.0005"
    assert fixed(0.3, 0) == "< 0.5"
    assert fixed(0.0) == "0.0" and fixed(-0.0) == "0.0"
    assert fixed(1234.56) == "1,234.6" and fixed(0.05) == "0.1"   # rounds half to even: 0.05 -> 0.1


def test_percentages_and_signed_errors():
    assert percent(0.001) == "< 0.5%" and percent(0.25) == "25%"
    assert percent(0.0) == "0%"
    assert percent(1e-6, 1, sign=True) == "< +0.05%" and percent(-1e-6, 1, sign=True) == "> -0.05%"
    assert percent(0.0, 1, sign=True) == "0.0%"      # an exact zero has no sign
    assert percent(0.012, 1, sign=True) == "+1.2%"


@given(st.floats(-1e6, 1e6, allow_nan=False), st.integers(0, 4))
def test_nothing_but_zero_prints_as_zero(value, digits):
    text = fixed(value, digits)
    shown_zero = text.lstrip("-") == f"{0:.{digits}f}"
    assert shown_zero == (value == 0)
    if not text.startswith(("<", ">")):
        assert math.isclose(float(text.replace(",", "")), value, abs_tol=0.5 * 10**-digits + 1e-9)


def test_run_and_compare_tables_use_it():
    assert report._cell(0.004) == "< 0.05" and report._cell(0.004, 3) == "0.004"
    assert report._cell(3) == "3" and report._cell(None) == "–"
    assert report._pools({"gpu": 0.001, "cpu": 0.0}) == "gpu < 0.5%, cpu 0%"
    assert report._pct({"gain": 1e-5}, "gain") == "< +0.05%"


def test_validation_errors_and_values():
    assert format_error(1e-5) == "< +0.05%" and format_error(-1e-5) == "> -0.05%"
    assert format_error(0.0) == "0.0%" and format_error(None) == "–"
    assert format_value(1e-5, "vsr") == "< 0.0005"


def test_calibration_fit_errors():
    assert calibration_pct(1e-7) == "< 0.005%" and calibration_pct(0.0) == "0.00%"


def test_interval_cells_use_it():
    from psdsim.sim.output.intervals import interval_text
    from psdsim.sim.uncertainty import Interval

    assert interval_text(Interval(0.004, 0.0, 0.01)) == "< 0.05 (0.0–< 0.05)"
    assert interval_text(Interval(0.004, 0.004, 0.004), 2) == "< 0.005"


def test_calibrations_kernel_time_is_not_printed_as_zero(tmp_path):
    """A trace of a millisecond of kernels printed `of 0.001 s`, a shorter one `of 0.000 s`."""
    from psdsim.calibration.calibrate import calibrate
    from psdsim.calibration.report import report_lines
    from tests.helpers.traces import kineto_trace

    line = next(x for x in report_lines(calibrate([kineto_trace(tmp_path)])) if "kernel time" in x)
    assert "of 0.000 s" not in line and (" us (" in line or " ms (" in line), line


def test_compare_ratios_use_it():
    fits = {"fits": True}
    summaries = {"a": {**fits, "vsr": 1e-6}, "b": {**fits, "vsr": 0.5}}
    _, ratio = report._compare_cells(summaries, [("a", "b")], ("vsr",), 3, True)
    assert ratio == ["< 0.005×"]
