"""Adaptive k for SD and PSD (`k_policy = "adaptive"`; docs/design.md §2, beyond the paper).

Before each decode step the engine picks how many tokens to draft, k' in 0..k, for the most
expected tokens per second of that step: with this step's batch, context and prefill chunks, the
cost model's prices, and the acceptance rate measured so far. k' = 0 turns speculation off for
the step (one target pass, no drafting, no rejection sampling), which pays when the verifier is
compute-bound or the drafts are poor. PSD picks k' for the sub-batch it drafts ahead (and for
the verified one in its init and fallback steps), pricing its step as the overlap of drafting
with a target pass of the same batch.

A request verifying k' drafts at per-token acceptance a emits 1 + a + ... + a^k' tokens on
average (i.i.d. leading successes, then the bonus or resampled token). The step costs k' draft
passes, a target pass over batch·(k' + 1) tokens (plus the step's prefill chunks), rejection
sampling when k' > 0, and the fixed overhead. The rate a is estimated online, as a real engine
could: accepted drafts / (accepted drafts + verifications that rejected one) — the
maximum-likelihood rate of i.i.d. leading successes — starting from the scenario's configured
mean acceptance (its `acceptance`, or the catalog's prior for the pair; not the requests' own
drawn rates, which no engine knows) with the weight of PRIOR_POSITIONS observed positions.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from psdsim.sim.costs import Chunks, StepCost
from psdsim.sim.profile import unrecorded

PRIOR_POSITIONS = 20.0


class AcceptanceEstimate:
    """The per-token acceptance rate seen so far (see the module docstring)."""

    def __init__(self, prior: float | None) -> None:
        prior = 0.5 if prior is None else prior
        self.accepted = PRIOR_POSITIONS * prior
        self.rejected = PRIOR_POSITIONS * (1.0 - prior)

    def update(self, proposed: np.ndarray, accepted: np.ndarray) -> None:
        self.accepted += float(accepted.sum())
        self.rejected += float(np.count_nonzero(accepted < proposed))

    def expect(self, rates: np.ndarray) -> None:
        """One position of each request at its acceptance probability, known without drafting it:
        where the draft model's distribution q sits beside the target's p, the probability that a
        draft would be accepted is sum(min(p, q)) (Leviathan et al. 2023), here the request's rate
        (the adaptive mode's AR steps, whose draft pass keeps the draft model's KV current)."""
        expected = float(rates.sum())
        self.accepted += expected
        self.rejected += len(rates) - expected

    @property
    def rate(self) -> float:
        return self.accepted / (self.accepted + self.rejected)


def best_k(cost: StepCost, batch: int, ctx: int, chunks: Chunks, k_max: int, rate: float,
           parallel: bool = False, link_s: Callable[[int], tuple[float, float]] | None = None) -> int:
    """The k' in 0..k_max with the most expected tokens per second of step time: drafting then
    the target pass (SD), or the longer of the two when they overlap (`parallel`: PSD, whose
    steady step is max(draft, verify), the theory's max(t, V) — docs/design.md §5). `link_s(tokens)`:
    where the drafter has a device of its own, the messages' time on the link beside the pass
    (on the verifier's side) and after it and the drafting (an output the driver receives once
    it has drafted, sim/methods/passes.link_seconds)."""
    with unrecorded(cost):   # candidates not drafted are not sizes the run used
        return _best_k(cost, batch, ctx, chunks, k_max, rate, parallel, link_s)


def _best_k(cost: StepCost, batch: int, ctx: int, chunks: Chunks, k_max: int, rate: float,
            parallel: bool, link_s: Callable[[int], tuple[float, float]] | None) -> int:
    best, best_speed = 0, -1.0
    expected = 0.0
    for k in range(k_max + 1):
        expected += rate ** k                      # 1 + a + ... + a^k
        tokens = batch * (k + 1)
        beside, after = link_s(tokens) if link_s is not None else (0.0, 0.0)
        verify = cost.verify(batch, tokens, ctx, chunks) + beside
        draft = cost.draft(batch, k, ctx) if k else 0.0
        seconds = (max(draft, verify) if parallel else draft + verify) + after + cost.overhead
        if k:
            seconds += cost.reject(tokens)
        speed = batch * expected / seconds
        if speed > best_speed:
            best, best_speed = k, speed
    return best
