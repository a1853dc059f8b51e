"""Requests: prompt lengths from a dataset profile (or a trace), arrivals, acceptance, aborts,
and the fan-out of a prompt into n samples (SamplingParams.n).

Draws happen in a fixed order (prompts, arrivals, acceptance, cancellations) from the run's one
Generator, so every method simulated with the same scenario and seed sees exactly the same
requests. A cancelling request (a share `abort_fraction`) is aborted by its client a uniformly
random delay in [0, abort_window_s] after its first token arrives, like a user pressing stop;
the engine applies it at the next step boundary, whichever sub-batch the request is in. A
request that finishes first is not aborted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
from psdsim.sim.acceptance import MAX_ACCEPTANCE, draw_request_acceptance
from psdsim.sim.catalog import Catalog, Dataset
from psdsim.sim.scenario import Scenario
from psdsim.sim.trace_replay import read_trace


@dataclass(frozen=True)
class Workload:
    arrival_s: np.ndarray   # float64, non-decreasing
    prompt_len: np.ndarray  # int64
    output_len: np.ndarray  # int64
    acceptance: np.ndarray  # float64 per-token acceptance per request (NaN when no draft model)
    abort_delay_s: np.ndarray  # float64 seconds after the first token the client cancels; NaN = never
    prompt: np.ndarray | None = None  # int64 prompt each request samples from (n > 1); None: its own
    acceptance_mean: float | None = None  # the configured mean the rates were drawn around

    def __len__(self) -> int:
        return len(self.prompt_len)


def sample_prompt_lengths(ds: Dataset, n: int, max_prompt: int, rng: np.random.Generator) -> np.ndarray:
    """Mixture of log-normals truncated to [min_prompt, max_prompt], by inverse-CDF sampling."""
    lo, hi = ds.min_prompt, min(ds.max_prompt, max_prompt)
    weights = np.array([c.weight for c in ds.components], dtype=float)
    which = rng.choice(len(weights), size=n, p=weights / weights.sum())
    mu = np.array([c.mu for c in ds.components])[which]
    sigma = np.array([c.sigma for c in ds.components])[which]
    # Bounds are widened by half a token so that rounding maps onto [lo, hi] evenly.
    f_lo = normal_cdf((np.log(lo - 0.5) - mu) / sigma) if lo > 0.5 else np.zeros(n)
    f_hi = normal_cdf((np.log(hi + 0.5) - mu) / sigma)
    u = f_lo + rng.random(n) * (f_hi - f_lo)
    lengths = np.exp(mu + sigma * normal_quantile(u))
    return np.clip(np.rint(lengths), lo, hi).astype(np.int64)


# The standard normal's CDF and quantile from the standard library, not scipy.special: importing
# scipy.special costs every `psdsim run` ~0.3-0.4 s of start-up (more than the engine loop of the
# default scenario's first few thousand steps), and these run once per request. Both are accurate
# to a few ulps, and the lengths they make are rounded to whole tokens, so they give the lengths
# scipy's ndtr/ndtri gave (tests/test_workload.py compares them over millions of draws).
_NORMAL = NormalDist()
_SQRT_HALF = math.sqrt(0.5)


def normal_cdf(x: np.ndarray) -> np.ndarray:
    """P(Z <= x): erfc of the far tail, where 1 + erf(x) would cancel to nothing."""
    return np.array([0.5 * math.erfc(-v * _SQRT_HALF) for v in x.tolist()], dtype=float)


def normal_quantile(p: np.ndarray) -> np.ndarray:
    """The inverse of normal_cdf; -inf at 0 and +inf at 1, as the limits are."""
    quantile = _NORMAL.inv_cdf
    return np.array([quantile(v) if 0.0 < v < 1.0 else (-math.inf if v <= 0.0 else math.inf)
                     for v in p.tolist()], dtype=float)


def make_workload(s: Scenario, cat: Catalog, rng: np.random.Generator) -> Workload:
    if s.trace:
        trace = read_trace(s.trace, s.max_model_len)
        n = min(s.requests, len(trace.prompt_len))
        prompts, outputs, arrivals = trace.prompt_len[:n], trace.output_len[:n], trace.arrival_s[:n]
        given = trace.acceptance[:n]
    else:
        n = s.requests
        if s.prompt_len:
            prompts = np.full(n, s.prompt_len, dtype=np.int64)
        else:
            prompts = sample_prompt_lengths(cat.datasets[s.dataset], n, s.max_model_len - s.output_len,
                                            rng)
        outputs = np.full(n, s.output_len, dtype=np.int64)
        if s.rate is None:
            arrivals = np.zeros(n)
        else:
            arrivals = np.cumsum(rng.exponential(1.0 / s.rate, size=n))
            arrivals -= arrivals[0]  # the first request opens the run
        given = np.full(n, np.nan)
    mean = s.acceptance
    if mean is None:
        prior = cat.acceptance_prior(s.draft, s.target)
        mean = prior.alpha if prior is not None else None
    acceptance = given.copy()
    if mean is not None:
        drawn = draw_request_acceptance(mean, s.acceptance_spread, n, rng)
        acceptance = np.where(np.isnan(given), drawn, np.minimum(given, MAX_ACCEPTANCE))
    abort_delay = np.full(n, np.nan)
    if s.abort_fraction > 0:
        cancels = rng.random(n) < s.abort_fraction
        delay = rng.uniform(0.0, s.abort_window_s, size=n)
        abort_delay = np.where(cancels, delay, np.nan)
    if s.n == 1:
        return Workload(arrivals, prompts, outputs, acceptance, abort_delay, acceptance_mean=mean)
    # SamplingParams.n: vLLM fans a prompt out into n requests that share its prompt and arrival
    # (and here its acceptance rate and its client's cancellation), each generating on its own.
    fan = [np.repeat(a, s.n) for a in (arrivals, prompts, outputs, acceptance, abort_delay)]
    return Workload(*fan, prompt=np.repeat(np.arange(len(prompts)), s.n), acceptance_mean=mean)
