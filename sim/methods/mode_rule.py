"""The adaptive mode's rule: which of PSD, SD and AR the coming steps run (`method = "adaptive"`,
sim/methods/adaptive_mode.py; docs/methods.md, "Adaptive mode").

MineDraft's paper leaves open (§A) what PSD should do when its load no longer fills two
sub-batches, or when verification turns compute-bound: turn speculation off, or change m. The rule
answers it from what the engine observes before each step: its decoding requests and their
context (seats and KV are the scheduler's: at a decode step the running set is already what they
allow), the acceptance rate measured so far (sim/methods/adaptive.py's estimate), and what a step
of each mode costs, priced by the run's cost model as the steps book their work
(sim/methods/passes.py) — on the analytic engines exactly the drafting and verification times the
steps then measure. For n requests holding C tokens of context, k drafts each, acceptance a,
E = 1 + a + ... + a^k tokens per verification:

    PSD  two steps, halves of n0 and n1:  per half  prep + max(t(other half), V(half) + c(half))
                                          + c'(half) + rejection + framework;   n·E tokens
    SD   one step:  t(n) + prep + V(n) + c(n) + c'(n) + rejection + framework;   n·E tokens
    AR   one step:  prep + max(t1(n), V1(n) + c1(n)) + c1'(n) + framework;       n tokens

t is k draft passes, V the target's pass over n(k+1) positions (V1 over n), c the link's time
beside the pass and c' after it and the drafting (MineDraft's driver receives the sampler output
once it has drafted: sim/methods/passes.link_seconds; with one message each way c' is 0 and c
both ways), t1 the draft model's one pass that keeps its KV current (sim/methods/adaptive_mode.py).
This is the theory's step model (theory/model.py: PSD max(t, V + c), SD t + V + c; its
optimum t* = V is where a half's drafting exactly hides behind the other half's verification)
with V and t growing with the batch. Two thresholds follow, which the rule applies through the
prices rather than as constants:

- PSD against SD, in the load. E cancels: PSD pays where 2 max(t(n/2), V(n/2) + c) < t(n) + V(n) + c
  (serial terms aside). With V = V0 + v·n and t = t0 + d·n that is n > max((V0 - t0)/d, (t0 - V0)/v):
  below it the verifier's fixed cost, paid twice by PSD's two passes, outweighs the drafting it
  hides; a memory-bound target (V0 large against the drafting's cost per request d) needs a
  deep batch before PSD pays.
- SD against AR, in the acceptance: SD pays where E_k(a)·(V1 + c1) > t + V + c, i.e. above the
  acceptance a*(k) at which k drafts earn back their drafting and the longer pass.

The tail (theory/tail.py) is the first case at small n: when one sub-batch empties, MineDraft
falls back to SD over the rest; the rule splits them again where two halves still pay.
Hysteresis: the current mode is kept unless another one's tokens/s beat its own by more than
`adaptive_margin` (a fraction), so a load that moves around a threshold does not switch at every
step (a switch into PSD costs an init step whose drafting nothing hides).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from psdsim.sim.costs import NO_CHUNKS
from psdsim.sim.methods.common import SimContext
from psdsim.sim.methods.passes import link_seconds
from psdsim.sim.profile import unrecorded

PSD, SD, AR = "psd", "sd", "ar"


def tokens_per_verification(rate: float, k: int) -> float:
    """1 + a + ... + a^k: accepted drafts (i.i.d. leading successes) plus the bonus token."""
    return sum(rate ** j for j in range(k + 1))


class Half(NamedTuple):
    """One of PSD's sub-batches as the rule prices it."""

    requests: int
    context: int       # their KV tokens
    extra_rows: int    # requests whose drafts were all accepted: vLLM V0 drafts a row more for each


class ModePrices:
    """Tokens per second of each mode for a given batch (see the module docstring)."""

    def __init__(self, sim: SimContext, k: int) -> None:
        self.sim, self.k = sim, k

    def rates(self, modes: Iterable[str], halves: tuple[Half, Half], rate: float) -> dict[str, float]:
        """Tokens/s of each of `modes` for two sub-batches `halves` (PSD runs them as they are; SD
        and AR run them as one batch) at acceptance `rate`."""
        with unrecorded(self.sim.cost):   # modes not run are not sizes the run used
            return {mode: self._rate(mode, halves, rate) for mode in modes}

    def _rate(self, mode: str, halves: tuple[Half, Half], rate: float) -> float:
        a, b = halves
        n, ctx, rows = a.requests + b.requests, a.context + b.context, a.extra_rows + b.extra_rows
        k, cost = self.k, self.sim.cost
        if mode == AR:
            return n / self._step_s(n, ctx, 0, cost.draft(n + rows, 1, ctx))
        tokens = n * tokens_per_verification(rate, k)
        if mode == PSD and a.requests and b.requests:
            return tokens / (self._step_s(a.requests, a.context, k, self._draft(b))
                             + self._step_s(b.requests, b.context, k, self._draft(a)))
        # SD, and PSD with one sub-batch empty: its fallback step is SD's
        return tokens / (cost.draft(n + rows, k, ctx) + self._step_s(n, ctx, k, 0.0))

    def psd_overlap(self, halves: tuple[Half, Half]) -> tuple[float, float]:
        """PSD's pair of steps over `halves`: the drafting beside each pass and each pass with the
        messages beside it, each summed over the pair (drafting is hidden where the first is at
        most the second: the theory's t <= V + c)."""
        with unrecorded(self.sim.cost):
            a, b = halves
            passes = (self._pass_s(half.requests, half.context, self.k)[0] for half in halves)
            return self._draft(a) + self._draft(b), sum(passes)

    def _draft(self, half: Half) -> float:
        return self.sim.cost.draft(half.requests + half.extra_rows, self.k, half.context)

    def _pass_s(self, batch: int, ctx: int, drafts: int) -> tuple[float, float]:
        """The target's pass over `drafts` drafts for each of `batch` requests with the messages
        beside it, and the messages after it and the drafting."""
        scored = batch * (drafts + 1)
        link_beside, link_after = link_seconds(self.sim, batch, ctx, NO_CHUNKS)(scored)
        return self.sim.cost.verify(batch, scored, ctx) + link_beside, link_after

    def _step_s(self, batch: int, ctx: int, drafts: int, beside_s: float) -> float:
        """A step verifying `drafts` drafts for each of `batch` requests, `beside_s` of drafting
        beside its pass: the driver's input prep, the longer of that drafting and the pass with
        its messages beside it, the messages after both (an output the driver receives once it
        has drafted), rejection sampling where drafts are scored, the framework's work."""
        sim, cost = self.sim, self.sim.cost
        scored = batch * (drafts + 1)
        verify, link_after = self._pass_s(batch, ctx, drafts)
        return (cost.driver_prep(batch, scored) + max(beside_s, verify) + link_after
                + (cost.reject(scored) if drafts else 0.0)
                + cost.framework(len(sim.scheduler.running), batch))


def split_evenly(halves: tuple[Half, Half]) -> tuple[Half, Half]:
    """The two sub-batches a split by count makes of these requests, each with its share of
    their context and extra rows (what the rule prices a switch into PSD at)."""
    n = halves[0].requests + halves[1].requests
    ctx, rows = halves[0].context + halves[1].context, halves[0].extra_rows + halves[1].extra_rows
    first = (n + 1) // 2
    a = Half(first, ctx * first // n, rows * first // n)
    return a, Half(n - first, ctx - a.context, rows - a.extra_rows)


def chosen(current: str, rates: Mapping[str, float], margin: float) -> str:
    """The mode to run: the fastest of `rates` (the first of equals), where its tokens/s beat the
    current mode's by more than `margin`; else the current one (which `rates` prices)."""
    best = max(rates, key=lambda mode: rates[mode])
    return best if rates[best] > rates[current] * (1.0 + margin) else current
