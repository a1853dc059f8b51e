"""Requests: prompt lengths from a dataset profile, output lengths, arrival times, acceptance.

Draws happen in a fixed order (prompts, arrivals, acceptance) from the run's one Generator, so
every method simulated with the same scenario and seed sees exactly the same requests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtr, ndtri

from sim.acceptance import draw_request_acceptance
from sim.catalog import Catalog, Dataset
from sim.scenario import Scenario


@dataclass(frozen=True)
class Workload:
    arrival_s: np.ndarray   # float64, non-decreasing
    prompt_len: np.ndarray  # int64
    output_len: np.ndarray  # int64
    acceptance: np.ndarray  # float64 per-token acceptance per request (NaN when no draft model)

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
    f_lo = ndtr((np.log(lo - 0.5) - mu) / sigma) if lo > 0.5 else np.zeros(n)
    f_hi = ndtr((np.log(hi + 0.5) - mu) / sigma)
    u = f_lo + rng.random(n) * (f_hi - f_lo)
    lengths = np.exp(mu + sigma * ndtri(u))
    return np.clip(np.rint(lengths), lo, hi).astype(np.int64)


def make_workload(s: Scenario, cat: Catalog, rng: np.random.Generator) -> Workload:
    n = s.requests
    if s.prompt_len:
        prompts = np.full(n, s.prompt_len, dtype=np.int64)
    else:
        prompts = sample_prompt_lengths(cat.datasets[s.dataset], n, s.max_model_len - s.output_len, rng)
    if s.rate is None:
        arrivals = np.zeros(n)
    else:
        arrivals = np.cumsum(rng.exponential(1.0 / s.rate, size=n))
        arrivals -= arrivals[0]  # the first request opens the run
    mean = s.acceptance
    if mean is None:
        prior = cat.acceptance_prior(s.draft, s.target)
        mean = prior.alpha if prior is not None else None
    if mean is None:
        acceptance = np.full(n, np.nan)
    else:
        acceptance = draw_request_acceptance(mean, s.acceptance_spread, n, rng)
    return Workload(arrivals, prompts, np.full(n, s.output_len, dtype=np.int64), acceptance)
