"""The tail of a finite request pool: how many PSD decode steps are not parallelised.

Setting (offline, as in MineDraft's benchmarks): N requests, 2m seats in two sub-batches of m,
request i needs L_i verifications (i.i.d.). Seats behave as lanes: a request finishing in
sub-batch X is replaced by the next waiting request in X (it joins the sub-batch drafted next),
which is first verified at X's next turn. Sub-batch A is verified at odd decode steps, B at even
ones, while both hold requests. If D_A, D_B are the rounds at which each sub-batch drains:

    decode steps         = D_A + D_B
    non-parallel steps   = 1 + (D_B - D_A)       if D_A <= D_B
                         = D_A - D_B             if D_A >  D_B

(1 for the init step; after one sub-batch drains, the next step still verifies drafts made
earlier, and every later step drafts then verifies). For N <= 2m there are no refills and D_X is
the maximum of the L_i in X, so the expectation is an exact sum over order statistics; for
N > 2m refills follow FIFO list scheduling and the expectation is estimated by sampling that
lane model (not the simulator). L's distribution follows from the output length, k and the
acceptance distribution: `verifications_pmf`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import beta as beta_dist

QUADRATURE_NODES = 64


def tokens_pmf(acceptance: float, k: int) -> np.ndarray:
    """P(tokens = j) for j = 0..k+1 per verification of k drafts with i.i.d. acceptance: j - 1
    leading accepted drafts (a^(j-1) (1 - a), or a^k for all k) plus the bonus token."""
    j = np.arange(k + 1)
    p = np.append(acceptance**j[:-1] * (1.0 - acceptance), acceptance**k)
    return np.concatenate([[0.0], p])


def _acceptance_nodes(mean: float, spread: float) -> tuple[np.ndarray, np.ndarray]:
    """Equal-weight quadrature of Beta(mean x spread, (1 - mean) x spread) at mid-quantiles."""
    q = (np.arange(QUADRATURE_NODES) + 0.5) / QUADRATURE_NODES
    nodes = beta_dist.ppf(q, mean * spread, (1.0 - mean) * spread)
    return np.clip(nodes, 1e-12, 1.0 - 1e-9), np.full(QUADRATURE_NODES, 1.0 / QUADRATURE_NODES)


def verifications_pmf(output_len: int, k: int, acceptance_mean: float,
                      acceptance_spread: float | None = None) -> np.ndarray:
    """P(L = l), l = 0..output_len - 1: verifications a request needs to emit its output tokens
    after the first (which the prefill step emits). Per-request acceptance is Beta-distributed
    with the given mean and concentration (None = every request has exactly the mean)."""
    need = output_len - 1
    pmf_l = np.zeros(need + 1)
    if need == 0:
        pmf_l[0] = 1.0
        return pmf_l
    if acceptance_spread is None:
        nodes, weights = np.array([acceptance_mean]), np.array([1.0])
    else:
        nodes, weights = _acceptance_nodes(acceptance_mean, acceptance_spread)
    steps = np.stack([tokens_pmf(a, k) for a in nodes])  # (nodes, k + 2)
    # state[n]: probability of having emitted exactly n < need tokens; absorbed mass is done.
    state = np.zeros((len(nodes), need))
    state[:, 0] = 1.0
    done_before = np.zeros(len(nodes))
    for verification in range(1, need + 1):
        nxt = np.zeros_like(state)
        for j in range(1, k + 2):
            if j < need:
                nxt[:, j:] += steps[:, j:j + 1] * state[:, :need - j]
        done_now = 1.0 - nxt.sum(axis=1)
        pmf_l[verification] = weights @ (done_now - done_before)
        done_before, state = done_now, nxt
        if (1.0 - done_now).max() < 1e-15:
            break
    pmf_l = np.maximum(pmf_l, 0.0)  # rounding can leave -1e-17 where nothing is left
    return pmf_l / pmf_l.sum()


@dataclass(frozen=True)
class TailEstimate:
    decode_steps: float          # expected decode steps
    non_parallel_steps: float    # expected decode steps not parallelised
    parallelization_rate: float  # 1 - E[non-parallel] / E[decode steps]
    exact: bool                  # True: exact sum (N <= 2m); False: sampled lane model


def _max_pmf(pmf: np.ndarray, n: int) -> np.ndarray:
    cdf = np.cumsum(pmf) ** n
    return np.diff(np.concatenate([[0.0], cdf]))


def _non_parallel(d_a: np.ndarray, d_b: np.ndarray) -> np.ndarray:
    return np.where(d_a <= d_b, 1 + d_b - d_a, d_a - d_b)


def tail_exact(requests: int, m: int, pmf_l: np.ndarray) -> TailEstimate:
    """Exact expectation for a pool of at most 2m requests (no refills)."""
    if not 1 <= requests <= 2 * m:
        raise ValueError("tail_exact needs 1 <= requests <= 2m")
    n_a, n_b = math.ceil(requests / 2), requests // 2  # flags alternate, A first
    values = np.arange(len(pmf_l))
    p_a = _max_pmf(pmf_l, n_a)
    if n_b == 0:  # one sub-batch only: nothing ever overlaps
        steps = float(p_a @ values)
        return TailEstimate(steps, steps, 0.0, True)
    p_b = _max_pmf(pmf_l, n_b)
    joint = np.outer(p_a, p_b)
    steps = float(p_a @ values + p_b @ values)
    non_parallel = float((joint * _non_parallel(values[:, None], values[None, :])).sum())
    return TailEstimate(steps, non_parallel, 1.0 - non_parallel / steps, True)


def tail_sampled(requests: int, m: int, pmf_l: np.ndarray, rng: np.random.Generator,
                 samples: int = 4000) -> TailEstimate:
    """The lane model for any pool size, its expectation estimated over `samples` draws."""
    if requests < 1 or m < 1:
        raise ValueError("requests and m must be positive")
    lengths = rng.choice(len(pmf_l), size=(samples, requests), p=pmf_l)
    seats = min(requests, 2 * m)
    lanes = lengths[:, :seats].copy()                  # rounds at which each lane frees
    in_a = np.arange(seats) % 2 == 0                   # flags alternate from A
    rows = np.arange(samples)
    for i in range(seats, requests):                   # FIFO refills to the earliest lane
        free_step = np.where(in_a, 2 * lanes - 1, 2 * lanes)
        lane = np.argmin(free_step, axis=1)
        lanes[rows, lane] += lengths[:, i]
    d_a = lanes[:, in_a].max(axis=1)
    d_b = lanes[:, ~in_a].max(axis=1) if (~in_a).any() else np.zeros(samples, dtype=np.int64)
    if not (~in_a).any():
        steps = float(d_a.mean())
        return TailEstimate(steps, steps, 0.0, False)
    steps = float((d_a + d_b).mean())
    non_parallel = float(_non_parallel(d_a, d_b).mean())
    return TailEstimate(steps, non_parallel, 1.0 - non_parallel / steps, False)


def tail(requests: int, m: int, pmf_l: np.ndarray, rng: np.random.Generator | None = None,
         samples: int = 4000) -> TailEstimate:
    """Exact for pools of at most 2m, the sampled lane model beyond (needs `rng`)."""
    if requests <= 2 * m:
        return tail_exact(requests, m, pmf_l)
    if rng is None:
        raise ValueError("pools deeper than 2m are estimated by sampling: pass a Generator")
    return tail_sampled(requests, m, pmf_l, rng, samples)
