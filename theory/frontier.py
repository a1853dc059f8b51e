"""Draft frontiers: the exponential f(t) = 1 - e^{-alpha t}, and fits of it to measured points.

A measured point is (drafting time per step, useful output per verification), e.g. one per draft
model or per k. `fit_frontier` fits y ~ b + F (1 - e^{-alpha t}) by least squares, with b fixed
(0 for accepted drafts alone, 1 when the bonus token is counted) and F fixed or fitted, and
reports how far the points sit from the fitted curve. Note that VSR measured while varying k is
*not* exponential in t (it is accepted/k); accepted tokens per verification is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares


def exponential(t: np.ndarray | float, alpha: float, scale: float = 1.0) -> np.ndarray:
    """F (1 - e^{-alpha t})."""
    return -scale * np.expm1(-alpha * np.asarray(t, dtype=float))


@dataclass(frozen=True)
class FrontierFit:
    alpha: float
    scale: float
    bonus: float
    points: int
    rmse: float            # root-mean-square residual, in y's units
    max_abs_error: float
    max_rel_error: float   # largest |residual| / |y|

    def predict(self, t: np.ndarray | float) -> np.ndarray:
        return self.bonus + exponential(t, self.alpha, self.scale)


def fit_frontier(t: np.ndarray, y: np.ndarray, *, bonus: float = 0.0,
                 scale: float | None = None) -> FrontierFit:
    """Least-squares fit of y ~ bonus + scale (1 - e^{-alpha t}); `scale=None` fits it too."""
    t, y = np.asarray(t, dtype=float), np.asarray(y, dtype=float)
    if t.shape != y.shape or t.ndim != 1:
        raise ValueError("t and y must be 1-D arrays of equal length")
    need = 1 if scale is not None else 2
    if len(t) < need or np.any(t <= 0):
        raise ValueError(f"need at least {need} points with positive drafting time")
    gain = y - bonus
    if np.any(gain <= 0):
        raise ValueError("every y must exceed the bonus: the frontier is positive")
    # Start from a rate that puts the middle point halfway up the curve.
    f0 = scale if scale is not None else 1.2 * gain.max()
    alpha0 = -np.log(np.clip(1 - np.median(gain) / f0, 1e-6, 1.0)) / np.median(t)

    def residuals(p: np.ndarray) -> np.ndarray:
        alpha, f = np.exp(p[0]), (scale if scale is not None else np.exp(p[1]))
        return bonus + exponential(t, alpha, f) - y

    start = [np.log(alpha0)] if scale is not None else [np.log(alpha0), np.log(f0)]
    sol = least_squares(residuals, start, xtol=1e-14, ftol=1e-14, gtol=1e-14)
    alpha = float(np.exp(sol.x[0]))
    fitted_scale = float(scale if scale is not None else np.exp(sol.x[1]))
    r = residuals(sol.x)
    return FrontierFit(alpha, fitted_scale, bonus, len(t), float(np.sqrt(np.mean(r**2))),
                       float(np.abs(r).max()), float(np.abs(r / y).max()))


def pareto_points(t: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats (less or equal time and more output)."""
    t, y = np.asarray(t, dtype=float), np.asarray(y, dtype=float)
    order = np.lexsort((-y, t))  # by time, best output first among equal times
    keep, best = [], -np.inf
    for i in order:
        if y[i] > best:
            keep.append(i)
            best = y[i]
    return np.array(sorted(keep), dtype=np.int64)
