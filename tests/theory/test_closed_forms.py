"""Every closed form against numerical optimisation (scipy.optimize), to 1e-9 relative."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq, minimize_scalar
from scipy.special import lambertw

from psdsim.theory.lambert import argmin_x, h
from psdsim.theory.model import FrontierModel, best_k, optimum_psd, optimum_sd, ratio

ALPHAS = (0.01, 0.3, 2.0, 25.0)
VS = (0.05, 1.0, 7.0, 60.0)
COMMS = (0.0, 0.4, 5.0)
TOKENS = ((0.0, 1.0), (1.0, 2.5), (1.0, 0.3))  # (bonus, scale)


def _numeric_argmin_linear(alpha, D, bonus, scale, t_lo):
    """argmin over t >= t_lo of (t + D)/(bonus + scale (1 - e^{-alpha t})) from the derivative's
    root (brentq), independent of the Lambert-W closed form."""
    def deriv(t):
        e = math.exp(-alpha * t)
        return bonus + scale * (1 - e) - (t + D) * scale * alpha * e
    if deriv(max(t_lo, 1e-300)) >= 0:
        return t_lo
    hi = max(t_lo, 1.0 / alpha)
    while deriv(hi) < 0:
        hi *= 2
    return brentq(deriv, max(t_lo, 0.0), hi, xtol=1e-300, rtol=4 * np.finfo(float).eps, maxiter=500)


@pytest.mark.parametrize("alpha, V, c, tokens", list(itertools.product(ALPHAS, VS, COMMS, TOKENS)))
def test_sd_and_psd_optima_match_numerical_optimisation(alpha, V, c, tokens):
    bonus, scale = tokens
    m = FrontierModel(alpha=alpha, V=V, bonus=bonus, scale=scale, comm=c, serial_sd=c / 2)
    sd = optimum_sd(m)
    t_num = _numeric_argmin_linear(alpha, V + c / 2, bonus, scale, 0.0)
    assert sd.t == pytest.approx(t_num, rel=1e-9, abs=1e-12)
    assert pytest.approx(float(m.per_token_sd(t_num)), rel=1e-9) == sd.T
    # PSD: the step is flat below V + c, so the optimum is at least there.
    psd = optimum_psd(m)
    t_num = _numeric_argmin_linear(alpha, 0.0, bonus, scale, V + c)
    assert psd.t == pytest.approx(t_num, rel=1e-9)
    assert pytest.approx(float(m.per_token_psd(t_num)), rel=1e-9) == psd.T
    # Nothing on a fine grid beats the closed forms.
    grid = np.linspace(1e-9, 10 * (V + c + 1 / alpha), 20001)
    assert m.per_token_sd(grid).min() >= sd.T * (1 - 1e-12)
    assert m.per_token_psd(grid).min() >= psd.T * (1 - 1e-12)


def test_paper_form_psd_optimum_is_V():
    for alpha, V in itertools.product(ALPHAS, VS):
        assert optimum_psd(FrontierModel(alpha=alpha, V=V)).t == pytest.approx(V, rel=1e-15)


def test_communication_shifts_the_psd_optimum_to_V_plus_c():
    m = FrontierModel(alpha=0.3, V=4.0, comm=1.5)
    assert optimum_psd(m).t == pytest.approx(5.5)
    assert ratio(m) < ratio(FrontierModel(alpha=0.3, V=4.0))


def test_serial_time_can_push_psd_drafting_beyond_V():
    """With a large fixed cost per step, drafting longer than V pays (the SD-form branch)."""
    m = FrontierModel(alpha=0.5, V=1.0, serial_psd=20.0)
    opt = optimum_psd(m)
    assert opt.t > m.V
    res = minimize_scalar(lambda t: float(m.per_token_psd(t)), bounds=(m.V, 100.0), method="bounded",
                          options={"xatol": 1e-12})
    assert pytest.approx(res.fun, rel=1e-9) == opt.T


def test_sd_optimum_uses_the_lower_lambert_branch():
    a = 1.7
    y = -lambertw(-math.exp(-(1 + a)), k=-1).real
    assert optimum_sd(FrontierModel(alpha=1.0, V=a)).t == pytest.approx(y - 1 - a, rel=1e-12)
    y0 = -lambertw(-math.exp(-(1 + a)), k=0).real
    assert y0 - 1 - a < 0  # the principal branch would give negative drafting time


@settings(max_examples=400, deadline=None)
@given(st.floats(1e-6, 900.0), st.floats(0.0, 20.0))
def test_lambert_branch_is_right_over_the_whole_range(a, u):
    x = argmin_x(a, u)
    assert x >= 0
    if a > u:
        # First-order condition e^x (1 + u) = 1 + x + a, checked in log form (no overflow).
        assert math.log1p(u) + x == pytest.approx(math.log(1 + x + a), rel=1e-9, abs=1e-12)
    else:
        assert x == 0
    # A minimum: neighbours are no better.
    for dx in (1e-3, 1e-1):
        assert h(x, a, u) <= h(x + dx, a, u) * (1 + 1e-12)
        if x > dx:
            assert h(x, a, u) <= h(x - dx, a, u) * (1 + 1e-12)


@pytest.mark.parametrize("alpha, V, t_token, bonus", [(0.1, 10, 1.0, 1.0), (0.02, 30, 2.5, 0.0),
                                                     (1.0, 1.678, 0.3, 0.0), (0.12, 10, 3.0, 1.0)])
def test_best_whole_k_equals_brute_force(alpha, V, t_token, bonus):
    m = FrontierModel(alpha=alpha, V=V, bonus=bonus)
    for method, per_token in (("sd", m.per_token_sd), ("psd", m.per_token_psd)):
        ks = np.arange(1, 65)
        brute = int(ks[np.argmin(per_token(ks * t_token))])
        assert best_k(m, t_token, method, k_max=64).k == brute


def test_acceptance_model_is_an_exact_exponential_frontier():
    """i.i.d. acceptance a, k drafts: E[accepted + 1] = 1 + a(1 - a^k)/(1 - a) = b + F f(k t)."""
    a, t_tok = 0.73, 0.8
    m = FrontierModel.from_acceptance(a, t_tok, V=5.0)
    for k in range(1, 12):
        expected = 1 + sum(a**j for j in range(1, k + 1))
        assert float(m.tokens(k * t_tok)) == pytest.approx(expected, rel=1e-12)


def test_invalid_models_are_rejected():
    with pytest.raises(ValueError):
        FrontierModel(alpha=0.0, V=1.0)
    with pytest.raises(ValueError):
        FrontierModel(alpha=1.0, V=1.0, comm=-1.0)
