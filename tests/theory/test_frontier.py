"""Frontier fits recover known parameters and report their error honestly."""

from __future__ import annotations

import numpy as np
import pytest

from psdsim.theory.frontier import exponential, fit_frontier, pareto_points


def test_noiseless_points_give_the_exact_frontier():
    t = np.array([1.0, 2.0, 4.0, 8.0, 12.0])
    y = 1.0 + exponential(t, 0.21, 2.4)
    fit = fit_frontier(t, y, bonus=1.0)
    assert fit.alpha == pytest.approx(0.21, rel=1e-7)
    assert fit.scale == pytest.approx(2.4, rel=1e-7)
    assert fit.rmse < 1e-9


def test_fixed_scale_fits_alpha_only():
    t = np.array([0.5, 1.0, 2.0])
    fit = fit_frontier(t, exponential(t, 1.3), scale=1.0)
    assert fit.alpha == pytest.approx(1.3, rel=1e-8) and fit.scale == 1.0


def test_noise_is_reported():
    rng = np.random.default_rng(0)
    t = np.linspace(1, 10, 12)
    y = exponential(t, 0.4, 1.0) * (1 + rng.normal(0, 0.02, len(t)))
    fit = fit_frontier(t, y)
    assert fit.alpha == pytest.approx(0.4, rel=0.1)
    assert 0.002 < fit.rmse < 0.05 and fit.max_rel_error > 0.005


def test_bad_input():
    with pytest.raises(ValueError):
        fit_frontier(np.array([1.0]), np.array([0.5]))
    with pytest.raises(ValueError):
        fit_frontier(np.array([1.0, 2.0]), np.array([0.5, 0.7]), bonus=1.0)


def test_pareto_points():
    t = np.array([1.0, 2.0, 2.0, 3.0, 4.0])
    y = np.array([0.5, 0.4, 0.6, 0.6, 0.9])
    assert pareto_points(t, y).tolist() == [0, 2, 4]
