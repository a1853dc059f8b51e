"""Per-token times of SD and PSD over an exponential draft frontier, and their optima.

The model (docs/design.md §5, generalised): drafting for time t per step yields an expected
b + F f(t) tokens per verification, f(t) = 1 - e^{-alpha t}; the verifier takes V per step.

    SD   step = t + V + s_sd                          (draft, then verify: sequential)
    PSD  step = max(t + c_d, V + c) + s_psd           (drafting of one sub-batch overlaps the
                                                       other's verification)
    per-token time T(t) = step(t) / (b + F f(t))

Assumptions (named because the results depend on them): V does not depend on t (nor on how many
tokens are scored); f is the same for both methods; the PSD pipeline is always full (no init
step, no tail: see theory.tail for a finite pool); c is communication on the verifier's side of
the overlap (the inputs out, and the sampler output back where it leaves when the pass ends),
c_d on the drafter's side, s_* serial work outside it (rejection sampling, framework overhead,
and a sampler output the driver receives only once it has drafted, as MineDraft's does:
max(t + c_d, V + c_in) + c_out).

The paper's form is b = 0, F = 1, c = c_d = s = 0. With i.i.d. per-token acceptance a and a draft
time t_tok per token, the simulator's expected tokens per verification are exactly
1 + a(1 - a^k)/(1 - a) = b + F f(k t_tok) with b = 1, F = a/(1 - a), alpha = ln(1/a)/t_tok.
Times are in any one unit; alpha is in its inverse.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from psdsim.theory.lambert import argmin_x, h


@dataclass(frozen=True)
class FrontierModel:
    alpha: float          # frontier sharpness: f(t) = 1 - exp(-alpha t)
    V: float              # verification time per step
    bonus: float = 0.0    # b: tokens per verification whatever the drafts (1 = bonus token)
    scale: float = 1.0    # F: tokens the frontier saturates at
    comm: float = 0.0     # c: PSD transfers on the verifier's side: max(t, V + c)
    comm_drafter: float = 0.0  # c_d: PSD transfers on the drafter's side: max(t + c_d, ...)
    serial_psd: float = 0.0    # s_psd: PSD work outside the overlap
    serial_sd: float = 0.0     # s_sd: SD work besides drafting and verifying

    def __post_init__(self) -> None:
        if not (self.alpha > 0 and self.V > 0 and self.scale > 0):
            raise ValueError("alpha, V and scale must be positive")
        if min(self.bonus, self.comm, self.comm_drafter, self.serial_psd, self.serial_sd) < 0:
            raise ValueError("bonus, communication and serial times must be non-negative")

    @classmethod
    def from_acceptance(cls, acceptance: float, t_token: float, V: float, **extra: float) -> FrontierModel:
        """The frontier the simulator realises with i.i.d. per-token acceptance `acceptance` and
        drafting time `t_token` per draft token (bonus token included)."""
        return cls(alpha=-math.log(acceptance) / t_token, V=V, bonus=1.0,
                   scale=acceptance / (1.0 - acceptance), **extra)

    def tokens(self, t: np.ndarray | float) -> np.ndarray | float:
        """Expected tokens per verification after drafting for time t."""
        return self.bonus - self.scale * np.expm1(-self.alpha * np.asarray(t, dtype=float))

    def step_sd(self, t: np.ndarray | float) -> np.ndarray | float:
        return np.asarray(t, dtype=float) + self.V + self.serial_sd

    def step_psd(self, t: np.ndarray | float) -> np.ndarray | float:
        t = np.asarray(t, dtype=float)
        return np.maximum(t + self.comm_drafter, self.V + self.comm) + self.serial_psd

    def per_token_sd(self, t: np.ndarray | float) -> np.ndarray | float:
        return self.step_sd(t) / self.tokens(t)

    def per_token_psd(self, t: np.ndarray | float) -> np.ndarray | float:
        return self.step_psd(t) / self.tokens(t)


@dataclass(frozen=True)
class Optimum:
    t: float   # optimal drafting time per step
    T: float   # per-token time there


def _solve(m: FrontierModel, D: float, t_lo: float) -> Optimum:
    """argmin over t >= t_lo of (t + D) / (b + F f(t)), via theory.lambert."""
    a, u = m.alpha * D, m.bonus / m.scale
    x = argmin_x(a, u, m.alpha * t_lo)
    return Optimum(x / m.alpha, h(x, a, u) / (m.alpha * m.scale))


def optimum_sd(m: FrontierModel) -> Optimum:
    """SD: minimise (t + V + s_sd) / tokens(t); Lambert W_{-1} when drafting pays at all."""
    return _solve(m, m.V + m.serial_sd, 0.0)


def optimum_psd(m: FrontierModel) -> Optimum:
    """PSD: for t <= t0 = V + c - c_d the step is flat, so longer drafting only helps; beyond t0
    the step is t + c_d + s_psd. Hence t* = max(t0, the SD-form optimum with D = c_d + s_psd);
    in the paper's form (no c, no s) that is t* = V."""
    t0 = max(0.0, m.V + m.comm - m.comm_drafter)
    opt = _solve(m, m.comm_drafter + m.serial_psd, t0)
    return Optimum(opt.t, float(m.per_token_psd(opt.t)))


def ratio(m: FrontierModel) -> float:
    """R = T_SD* / T_PSD*: how many times faster per token PSD is, each at its own optimum."""
    return optimum_sd(m).T / optimum_psd(m).T


@dataclass(frozen=True)
class DiscreteOptimum:
    k: int      # draft tokens per step
    t: float    # k * t_token
    T: float    # per-token time


def best_k(m: FrontierModel, t_token: float, method: str, k_max: int = 64) -> DiscreteOptimum:
    """The best whole number of draft tokens when drafting time is k * t_token: T is
    quasi-convex in t, so it is one of the two integers around the continuous optimum."""
    if method not in ("sd", "psd"):
        raise ValueError("method must be 'sd' or 'psd'")
    opt = optimum_sd(m) if method == "sd" else optimum_psd(m)
    per_token = m.per_token_sd if method == "sd" else m.per_token_psd
    k_real = opt.t / t_token
    candidates = {min(max(1, math.floor(k_real)), k_max), min(max(1, math.ceil(k_real)), k_max)}
    best = min(candidates, key=lambda k: (float(per_token(k * t_token)), k))
    return DiscreteOptimum(best, best * t_token, float(per_token(best * t_token)))
