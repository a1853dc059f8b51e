"""Fitting samples to profile terms: recovery, robustness, identifiability, acceptance."""

from __future__ import annotations

import math

import numpy as np
import pytest

from psdsim.calibration.fit import acceptance_stats, fit_term
from psdsim.calibration.samples import StepSample
from psdsim.sim.profile_schema import draft_features, verify_features


def _draft(batch: float, k: float, ctx: float, seconds: float) -> StepSample:
    return StepSample("draft", 0.0, seconds, seconds, seconds, batch=batch, k=k, ctx=ctx)


TRUE_DRAFT = (2e-3, 5e-6, 4e-9, 3e-4)   # per pass, per pass-token, per cached token read, per call


def _draft_samples(rng: np.random.Generator, n: int, noise: float = 0.0) -> list[StepSample]:
    out = []
    for _ in range(n):
        b, k, ctx = rng.integers(1, 33), rng.integers(1, 7), rng.integers(100, 20000)
        t = float(np.dot(TRUE_DRAFT, draft_features(b, k, ctx)))
        out.append(_draft(b, k, ctx, t * (1 + noise * rng.standard_normal())))
    return out


def test_exact_samples_give_the_true_coefficients() -> None:
    fit = fit_term("draft", _draft_samples(np.random.default_rng(1), 200))
    assert fit is not None
    assert fit.term.coef == pytest.approx(TRUE_DRAFT, rel=1e-6)
    assert fit.term.mape < 1e-9
    assert fit.term.samples == 200
    assert fit.term.ranges["k"][0] >= 1 and fit.term.ranges["k"][1] <= 6


def test_noise_and_stalls_are_handled_robustly() -> None:
    rng = np.random.default_rng(2)
    samples = _draft_samples(rng, 400, noise=0.01)
    stalls = [_draft(s.batch, s.k, s.ctx, 5 * s.duration_s) for s in samples[:12]]  # 3% stalls
    fit = fit_term("draft", samples + stalls)
    assert fit is not None
    assert fit.term.coef == pytest.approx(TRUE_DRAFT, rel=0.03)
    assert fit.term.dropped["outlier (residual > 5 robust sigma and > 2%)"] >= 12
    assert 0.003 < fit.term.mape < 0.02
    assert fit.term.cv_mape is not None and fit.term.cv_mape >= fit.term.mape * 0.9


def test_features_the_trace_lacks_are_fixed_at_zero_and_said() -> None:
    """vLLM step names carry no context length: the KV-read term cannot be fitted."""
    samples = [StepSample("verify", 0, 1, 0.01 + 1e-5 * t, 0, batch=t / 4, tokens=t)
               for t in (16, 32, 48, 64)]
    fit = fit_term("verify", samples)
    assert fit is not None
    assert fit.term.coef[2] == 0.0
    assert "ctx" in fit.term.fixed_features
    assert any("ctx not in the trace" in n for n in fit.notes)
    assert fit.term(verify_features(40, 0)) == pytest.approx(0.01 + 4e-4, rel=1e-9)


def test_constant_features_are_not_identifiable() -> None:
    samples = [StepSample("verify", 0, 1, 0.02 + 1e-8 * c, 0, batch=16, tokens=64, ctx=c)
               for c in range(1000, 9000, 500)]
    fit = fit_term("verify", samples)
    assert fit is not None
    assert "tokens" in fit.term.fixed_features
    assert fit.term.coef[0] == pytest.approx(0.02, rel=1e-6)


def test_mixed_passes_missing_attributes_and_zero_durations_are_dropped() -> None:
    good = [StepSample("comm", 0, 1, 1e-5 + b * 1e-10, 0, nbytes=b) for b in (1e3, 1e5, 1e6, 1e7)]
    bad = [StepSample("comm", 0, 1, 1e-4, 0),                       # no byte count
           StepSample("comm", 0, 1, 0.0, 0, nbytes=100.0)]          # zero duration
    fit = fit_term("comm", good + bad)
    assert fit is not None and fit.term.samples == 4
    assert fit.term.dropped == {"missing nbytes": 1, "zero or negative duration": 1}
    mixed = [StepSample("verify", 0, 1, 0.02, 0, batch=4, tokens=16, ctx=1, mixed=True)] * 5
    assert fit_term("verify", mixed) is None


def test_acceptance_statistics_invert_the_simulators_model() -> None:
    a, k = 0.7, 3
    mean = sum(a ** i for i in range(1, k + 1))
    rows = [StepSample("verify", 0, 1, 1, 1, batch=10, tokens=40, k=k, accepted=10 * mean)] * 5
    stats = acceptance_stats(rows)
    assert stats["per_token"] == pytest.approx(a, rel=1e-9)
    assert stats["vsr"] == pytest.approx(mean / k)
    assert acceptance_stats([StepSample("verify", 0, 1, 1, 1, batch=10, tokens=40)]) == {}
    assert math.isclose(stats["mean_accepted"], mean)
