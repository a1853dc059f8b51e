"""Closed-form theory of parallel speculative decoding (numpy and scipy only, nothing of ours).

- `theory.model`: per-token times of SD and PSD over an exponential draft frontier, their optima
  (Lambert W), the ratio R, the best whole k; communication and serial-time extensions.
- `theory.frontier`: the exponential frontier and least-squares fits of it to measured points.
- `theory.published`: the paper's published constants and where this model disagrees with them.
- `theory.acceptance`: expected accepted drafts per verification from per-position rates.
- `theory.tail`: the expected share of non-parallelised steps for a finite request pool.
"""

from psdsim.theory.acceptance import expected_accepted, expected_accepted_iid
from psdsim.theory.frontier import FrontierFit, exponential, fit_frontier, pareto_points
from psdsim.theory.model import (
           DiscreteOptimum,
           FrontierModel,
           Optimum,
           best_k,
           optimum_psd,
           optimum_sd,
           ratio,
)
from psdsim.theory.tail import TailEstimate, tail, verifications_pmf

__all__ = ["DiscreteOptimum", "FrontierFit", "FrontierModel", "Optimum", "TailEstimate", "best_k",
           "expected_accepted", "expected_accepted_iid",
           "exponential", "fit_frontier", "optimum_psd", "optimum_sd", "pareto_points", "ratio",
           "tail", "verifications_pmf"]
