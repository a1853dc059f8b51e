"""Acceptance: per-request rates from a Beta distribution, per-step accepted counts.

Each request has its own per-token acceptance rate a ~ Beta(mean x spread, (1 - mean) x spread),
i.i.d. across draft positions unless the acceptance prior gives `per_position` factors.
A verification of n drafted tokens accepts the leading successes, capped at n. The number of
successes before the first rejection is Geometric: P(G >= j) = a^j, drawn here as
G = floor(ln U / ln a) with U uniform on (0, 1] (one uniform per request, 5x cheaper than numpy's
geometric sampler at batch sizes of a few dozen). The target then emits one more token (bonus or
resampled), so a request generates accepted + 1 tokens per verification.

With factors f_1 = 1 >= f_2, ... (real acceptance falls with position), position j is accepted,
given the ones before, with probability a f_j, so P(G >= j) = a^j f_1 ... f_j: the same one
uniform per request, inverted through that survival function (G counts the positions j with
ln U <= j ln a + ln f_1 + ... + ln f_j, a prefix as the right side falls with j). A verification
longer than the list takes the last factor for the positions beyond it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MAX_ACCEPTANCE = 1.0 - 1e-9  # keeps ln(a) < 0
MIN_ACCEPTANCE = 1e-12       # keeps ln(a) finite (Beta draws can round to 0)
QUADRATURE_NODES = 64        # nodes of accepted_per_draft's average over the Beta population


def draw_request_acceptance(mean: float, spread: float, n: int, rng: np.random.Generator) -> np.ndarray:
    a = rng.beta(mean * spread, (1.0 - mean) * spread, size=n)
    return np.clip(a, MIN_ACCEPTANCE, MAX_ACCEPTANCE)


class AcceptanceSampler:
    """Draws accepted counts from the run's Generator, ln(U) pre-drawn in blocks.

    Drawing a block of uniforms at once and consuming it in order is as deterministic as drawing
    per step, and saves two numpy calls per simulated step.
    """

    BLOCK = 1 << 14

    def __init__(self, rng: np.random.Generator, position_factors: Sequence[float] = ()) -> None:
        self._rng = rng
        self._log_u = np.empty(0)
        self._pos = 0
        self._log_factors = np.log(np.asarray(position_factors, dtype=float))

    def _take(self, n: int) -> np.ndarray:
        if self._pos + n > len(self._log_u):
            fresh = np.log(1.0 - self._rng.random(max(self.BLOCK, n)))  # U in (0, 1]
            self._log_u = np.concatenate([self._log_u[self._pos:], fresh])
            self._pos = 0
        out = self._log_u[self._pos:self._pos + n]
        self._pos += n
        return out

    def accepted(self, log_acceptance: np.ndarray, proposed: np.ndarray) -> np.ndarray:
        """Accepted draft tokens for requests with ln(per-token acceptance) `log_acceptance` and
        `proposed` drafts each."""
        # ln U / ln a >= 0, so truncation to an integer is the floor; it is below 4e10 (ln U >=
        # ln 2^-53, ln a <= ln MAX_ACCEPTANCE), so truncating before the cap by the integer
        # `proposed` gives what capping first would, with an integer minimum (the cheaper one).
        log_u = self._take(len(proposed))
        if len(self._log_factors):
            return self._accepted_by_position(log_u, log_acceptance, proposed)
        return np.minimum((log_u / log_acceptance).astype(np.int64), proposed)

    def _accepted_by_position(self, log_u: np.ndarray, log_acceptance: np.ndarray,
                              proposed: np.ndarray) -> np.ndarray:
        """Accepted drafts with position j's rate a f_j: the positions whose log survival
        j ln a + ln f_1 + ... + ln f_j is at least ln U, up to `proposed`."""
        width = int(proposed.max(initial=0))
        positions = np.arange(1, width + 1)
        log_survival = positions * log_acceptance[:, None] + cumulative_log_factors(self._log_factors, width)
        within = (log_u[:, None] <= log_survival) & (positions <= proposed[:, None])
        return within.sum(axis=1, dtype=np.int64)

    def bernoulli(self, log_acceptance: np.ndarray) -> np.ndarray:
        """One acceptance trial per request: True with probability exp(log_acceptance)."""
        return self._take(len(log_acceptance)) <= log_acceptance



def cumulative_log_factors(log_factors: np.ndarray, k: int) -> np.ndarray:
    """ln(f_1 ... f_j) for j = 1..k, the last factor repeated past the (non-empty) list's end."""
    ext = np.concatenate([log_factors[:k], np.full(max(0, k - len(log_factors)), log_factors[-1])])
    return np.cumsum(ext)


def position_survival(a: np.ndarray | float, k: int, position_factors: Sequence[float]) -> np.ndarray:
    """P(G >= j) = a^j f_1 ... f_j for j = 1..k (rows: the rates a)."""
    log_f = cumulative_log_factors(np.log(np.asarray(position_factors, dtype=float)), k)
    return np.asarray(a, dtype=float)[..., None] ** np.arange(1, k + 1) * np.exp(log_f)


def accepted_per_draft(alpha: float, k: int, spread: float | None = None,
                       position_factors: Sequence[float] = ()) -> float:
    """Mean accepted drafts per verification of k, as an engine counts them over every draft of
    a run. One request at rate a accepts e(a) = a + a^2 + ... + a^k per verification; under a
    Beta(alpha x spread, (1 - alpha) x spread) population (spread None: every request at alpha)
    a request needs verifications in proportion to 1 / (1 + e(a)) for its output, so the
    draft-weighted mean is E[e / (1 + e)] / E[1 / (1 + e)]: below e(alpha), as the requests that
    accept least are verified most. With `position_factors` e(a) is a + a^2 f_2 + ... (its
    survival function, position_survival)."""
    if spread is None:
        return float(_per_request_accepted(alpha, k, position_factors))
    a, w = beta_quadrature(alpha, spread)
    per_request = _per_request_accepted(a, k, position_factors)
    return float(w @ (per_request / (1.0 + per_request)) / (w @ (1.0 / (1.0 + per_request))))


def beta_quadrature(mean: float, spread: float) -> tuple[np.ndarray, np.ndarray]:
    """Gauss nodes on [0, 1] and probability weights of Beta(mean x spread, (1 - mean) x spread):
    exact for polynomials of degree below 2 x QUADRATURE_NODES, so also for a Beta density that is
    unbounded at an end (mean x spread below 1). Golub-Welsch on the Jacobi recurrence written in
    mean and spread, whose terms stay finite over every spread a scenario allows: a library's
    Gauss-Jacobi rule takes the exponents spread x mean - 1, which round to -1 for a spread near 0,
    and scales its weights by 2^spread, which overflows past a spread of about a thousand."""
    from scipy.linalg import eigh_tridiagonal

    n = np.arange(1, QUADRATURE_NODES, dtype=float)
    s, p, q = spread, mean * spread, (1.0 - mean) * spread
    # the recurrence of Jacobi polynomials on [-1, 1], exponents q - 1 and p - 1, integer parts
    # added first (2 + s - 2 is 0 for a tiny s) and the 0/0 of b_1 at s = 1 cancelled by hand
    diagonal = np.concatenate([[2.0 * mean - 1.0],
                               (2.0 * mean - 1.0) * (s / (2 * (n - 1) + s)) * ((s - 2) / (2 * n + s))])
    m = n[1:]
    squared = np.concatenate([[4.0 * mean * (1.0 - mean) / (s + 1)],
                              4 * m * ((m - 1) + q) * ((m - 1) + p) * ((m - 2) + s)
                              / ((2 * (m - 1) + s) ** 2 * ((2 * m - 1) + s) * ((2 * m - 3) + s))])
    x, vectors = eigh_tridiagonal(diagonal, np.sqrt(squared))
    return np.clip((1.0 + x) / 2.0, 0.0, 1.0), vectors[0] ** 2


def _per_request_accepted(a: np.ndarray | float, k: int,
                          position_factors: Sequence[float]) -> np.ndarray | float:
    """Expected accepted drafts of a verification of k at rate a: the sum of the survival
    function (the i.i.d. power sum when there are no factors)."""
    if len(position_factors):
        return position_survival(a, k, position_factors).sum(axis=-1)
    return sum(a**j for j in range(1, k + 1))


def alpha_for_accepted(mean_accepted: float, k: int, spread: float | None = None,
                       position_factors: Sequence[float] = ()) -> float:
    """The acceptance mean whose accepted drafts per verification of k (accepted_per_draft) are
    `mean_accepted`, in (0, k): what a measured acceptance length says of the per-token rate.
    Bisection, as accepted_per_draft increases with alpha."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if accepted_per_draft(mid, k, spread, position_factors) < mean_accepted:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
