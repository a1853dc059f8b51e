"""validate says when the machine's noise, not the model, may explain an error: each
PSD mean's 95% interval from the repeats, the error range it allows, and a plain verdict."""

from __future__ import annotations

import pytest

from psdsim.engine.validate.report import TARGETS, error_interval, noise_check


def test_the_interval_of_three_repeats():
    iv = error_interval([100.0, 102.0, 98.0], 105.0)
    # mean 100, sd 2, t(0.975, 2) = 4.303: ±4.97% of the mean
    assert iv["half"] == pytest.approx(4.303 * 2 / 3 ** 0.5 / 100, rel=1e-3)
    lo, hi = iv["error"]
    assert lo == pytest.approx(105 / (100 + 4.969) - 1, abs=1e-4)
    assert hi == pytest.approx(105 / (100 - 4.969) - 1, abs=1e-4)
    assert error_interval([100.0], 105.0) is None and error_interval([100.0, None], 105.0) is None
    assert error_interval([1.0, 100.0], 50.0) == {"half": None, "error": None}   # wider than the mean


def _row(k: int, throughput: list[float], p50: list[float]) -> dict:
    metrics = {}
    for key, values in (("throughput_tok_s", throughput), ("latency_ms.p50", p50)):
        metrics[key] = {"repeats": values, "interval": error_interval(values, values[0])}
    return {"label": "psd", "k": k, "metrics": metrics}


def test_quiet_repeats_pass_noisy_ones_are_named(monkeypatch):
    monkeypatch.setattr("os.getloadavg", lambda: (0.5, 0.5, 0.5))
    quiet = noise_check([_row(1, [100.0, 100.5, 99.5], [50.0, 50.2, 49.8])], cpus=2)
    assert not quiet["exceeds"] and quiet["verdict"].startswith("the repeats agree")
    noisy = noise_check([_row(1, [100.0, 100.5, 99.5], [50.0, 50.2, 49.8]),
                         _row(3, [100.0, 171.0, 128.0], [50.0, 50.1, 49.9])], cpus=2)
    assert noisy["exceeds"]
    assert noisy["half_widths"]["psd k=3"]["throughput_tok_s"] > TARGETS["throughput_tok_s"]
    assert "psd k=3 throughput_tok_s" in noisy["verdict"] and "--repeats 6" in noisy["verdict"]


def test_one_run_and_a_busy_machine_are_said(monkeypatch):
    monkeypatch.setattr("os.getloadavg", lambda: (6.0, 6.0, 6.0))
    row = {"label": "psd", "k": 1, "metrics": {"throughput_tok_s": {}, "latency_ms.p50": {}}}
    out = noise_check([row], cpus=2)
    assert out["exceeds"] and "--repeats 3" in out["verdict"] and "3.0 per CPU" in out["verdict"]
