"""The one optimisation behind every closed form: a linear step time over an exponential frontier.

Minimise over t >= t_lo the per-token time

    T(t) = (t + D) / (b + F (1 - e^{-alpha t}))

(step time t + D, expected tokens per step b + F f(t) with f(t) = 1 - e^{-alpha t}). In the
dimensionless variables x = alpha t, a = alpha D, u = b / F it is T = h(x) / (alpha F) with

    h(x) = (x + a) / (u + 1 - e^{-x}).

h is quasi-convex (a linear function over a concave positive one), and h'(x) has the sign of
u + 1 - e^{-x} (1 + x + a). If a <= u, h increases from x = 0 and the unconstrained optimum is
x = 0. Otherwise the first-order condition e^{x} (1 + u) = 1 + x + a, with y = 1 + x + a, reads
y e^{-y} = (1 + u) e^{-(1 + a)}, whose root above 1 + a is on the lower branch of Lambert W:

    x* = -W_{-1}(-(1 + u) e^{-(1 + a)}) - 1 - a,

and there h(x*) = e^{x*}, since the condition makes u + 1 - e^{-x} equal to (x + a) e^{-x}.
The constrained optimum is max(x_lo, x*) by quasi-convexity.
"""

from __future__ import annotations

import math

from scipy.special import lambertw

# Below this |z| scipy's W_{-1}(z) loses the argument to underflow; solve in log space instead.
_TINY = 1e-280


def w_minus1_of_neg_exp(log_z: float) -> float:
    """W_{-1}(-z) for z = e^{log_z} in (0, 1/e]: the root w <= -1 of w e^{w} = -z.

    Uses scipy's lambertw on the lower branch (k=-1) where -z is representable, and Newton's
    method on y - ln(y) = -log_z (y = -w) otherwise, so huge a = alpha V stays exact.
    """
    if log_z > -1.0 + 1e-15:
        raise ValueError("W_-1(-z) needs 0 < z <= 1/e")
    if log_z > math.log(_TINY):
        return float(lambertw(-math.exp(log_z), k=-1).real)
    target = -log_z
    y = target + math.log(target)  # asymptotic start, y > 1
    for _ in range(50):
        step = (y - math.log(y) - target) / (1.0 - 1.0 / y)
        y -= step
        if abs(step) <= 1e-15 * y:
            break
    return -y


def argmin_x(a: float, u: float, x_lo: float = 0.0) -> float:
    """argmin over x >= x_lo of h(x) = (x + a) / (u + 1 - e^{-x}) (see the module docstring)."""
    if a < 0 or u < 0 or x_lo < 0:
        raise ValueError("a, u and x_lo must be non-negative")
    x_free = 0.0
    if a > u:
        w = w_minus1_of_neg_exp(math.log1p(u) - (1.0 + a))
        x_free = max(0.0, -w - 1.0 - a)
    return max(x_lo, x_free)


def h(x: float, a: float, u: float) -> float:
    """(x + a) / (u + 1 - e^{-x}), with its limit at x = 0 when a = u = 0."""
    denominator = u - math.expm1(-x)
    if denominator == 0.0:
        return 1.0 if a == 0.0 else math.inf
    return (x + a) / denominator
