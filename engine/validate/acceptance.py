"""Acceptance as the SD runs measured it, in the simulator's terms.

The simulator draws each request's per-token acceptance rate from Beta(a·S, (1 − a)·S) (mean a,
concentration S = `acceptance_spread`) and accepts i.i.d. leading successes, capped at k. Both
parameters come from the engine's SD runs, never from PSD or PEARL:

- S, how much requests differ: the engine's requests differ far less than the simulator's
  default S = 20 assumes (random prompts, one model pair), and the spread decides how scattered
  their finishing times are, hence how many prefill steps refill the batch (a prefill step costs
  more than a decode step here). Fitted by the method of moments: per SD run, the standard
  deviation over requests of their verification count (SD verifies every running request every
  decode step); the S on a grid whose simulated SD runs (same scenarios, a few seeds) come
  closest over all k.
- a at each k: the value for which E[a + a² + … + a^k] under that Beta equals the SD run's mean
  accepted drafts per verification (E[a^j] = Π_{r<j} (α + r) / (α + β + r)), so the simulator
  reproduces the measured mean, where inverting a + … + a^k = mean (one rate for all requests)
  would not once rates are spread.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from psdsim.calibration.fit import acceptance_stats
from psdsim.calibration.samples import StepSample
from psdsim.calibration.trace_error import TraceError

SPREADS = (5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 3000.0, 10000.0)
SEEDS = 3


def acceptance_mean(mean_accepted: float, k: int, spread: float) -> float:
    """The Beta mean a whose E[a + … + a^k] is `mean_accepted` (see the module docstring)."""
    if not 0 < mean_accepted < k:
        raise ValueError(f"mean accepted drafts {mean_accepted} outside (0, {k})")

    def expected(a: float) -> float:
        alpha, moment, out = a * spread, 1.0, 0.0
        for r in range(k):
            moment *= (alpha + r) / (spread + r)
            out += moment
        return out

    lo, hi = 1e-9, 1 - 1e-9
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected(mid) < mean_accepted else (lo, mid)
    return min(max((lo + hi) / 2, 1e-6), 1 - 1e-6)


def mean_accepted(samples: Sequence[StepSample], ks: Sequence[int]
                  ) -> tuple[dict[int, float], dict[str, Any]]:
    """Per k, the SD verify samples' mean accepted drafts per verified request, with their VSR."""
    out: dict[int, float] = {}
    doc: dict[str, Any] = {}
    for k in ks:
        stats = acceptance_stats([s for s in samples if s.kind == "verify" and s.k == k])
        if not stats or not 0 < stats["mean_accepted"] < k:
            raise TraceError(f"SD runs at k={k}", "no usable acceptance (mean accepted drafts "
                             f"{stats.get('mean_accepted') if stats else None}: none or all of them); "
                             "validation needs some drafts rejected",
                             "change model.draft_noise or model.draft_layers")
        out[k] = stats["mean_accepted"]
        doc[str(k)] = {"vsr": stats["vsr"], "mean_accepted": stats["mean_accepted"],
                       "per_token_one_rate": stats.get("per_token")}
    return out, doc


def verifications_std(steps: Iterable[Mapping[str, Any]]) -> float:
    """Standard deviation over requests of the decode steps that verified each: the step records
    (calibration.minedraft) of one SD run's iteration."""
    counts: Counter[str] = Counter()
    for step in steps:
        if not step.get("is_prompt_run") and step.get("batched_requests"):
            counts.update(step["batched_requests"])
    return float(np.std(list(counts.values()))) if counts else float("nan")


def fit_spread(engine_std: Mapping[Any, float], simulated_std: Callable[[Any, float, int], float]
               ) -> tuple[float, dict[str, Any]]:
    """The grid spread whose simulated SD runs' verification-count spread is closest (squared
    error summed over the SD runs, each the mean over SEEDS seeds) to the engine's. Both are keyed
    by SD run (its k in `validate --engine reference`, its name from traces); `simulated_std(run,
    S, seed)` simulates that run with concentration S."""
    scores = {}
    for spread in SPREADS:
        sims = {k: float(np.mean([simulated_std(k, spread, seed) for seed in range(SEEDS)]))
                for k in engine_std}
        scores[spread] = (sum((sims[k] - engine_std[k]) ** 2 for k in engine_std), sims)
    best = min(scores, key=lambda s: scores[s][0])
    return best, {"spread": best, "engine_verifications_std": {str(k): v for k, v in engine_std.items()},
                  "simulated_verifications_std": {str(k): v for k, v in scores[best][1].items()},
                  "grid": list(SPREADS), "seeds": SEEDS}
