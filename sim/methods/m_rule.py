"""The adaptive method's rule for m (`adaptive_m = true`, sim/methods/adaptive_mode.py;
docs/methods.md, "Adjusting m"): how many requests each of PSD's two sub-batches may hold, acted
on through the scheduler's running cap 2m, decided before each PSD step.

MineDraft's paper leaves open (§A) what PSD should do when its load grows until verification is
compute-bound: "adaptively adjust m". Our reading takes the theory's optimum (theory/model.py,
docs/theory.md): a PSD step costs max(t, V + c) per sub-batch, and drafting is free exactly while
t <= V + c (t* = V: a half's drafting hides behind the other half's verification). With
V = V0 + v·n and t = t0 + d·n per sub-batch of n, more requests per sub-batch pay while the
verifier's fixed cost V0 is spread over them (memory-bound verification) and drafting stays
hidden; once the pass is compute-bound (V0 small against v·n) or drafting grows past the pass,
they buy little throughput and lengthen every step. From what the engine observes (its running
and waiting requests, its KV pool, the drafting and verification times of PSD's last pair of
steps), with `adaptive_margin` as hysteresis, m moves by a step of max(1, m // 4) (large enough
that a step where V0 dominates prices well above the default margin, about step/m more tokens/s):

- Grow, while requests wait and the running set fills its 2m seats, where the KV pool holds the
  running requests and the newcomers each at the blocks a request holds when it ends (as the
  requests finished so far held them on average; before any has, at max_model_len, the most a
  request may hold: a pool that holds them only at their prompts would preempt them as they
  grow) and has never run out at as many running requests, where drafting at the larger m stays
  hidden (priced: t <= V + c) or hides no worse than now (t / (V + c) does not rise: where the
  drafter's fixed cost exceeds the verifier's, V grows faster with the batch than t and a larger m
  moves toward t* = V, not away from it), and where its PSD step prices tokens/s more than the
  margin above now.
- Shrink where the step just run preempted (the KV pool ran out: fewer seats stop the scheduler
  admitting the victims again only to preempt them), unless the set that ran out held more than
  2m (the excess a shrink left running, which the scheduler's own preemption sheds: one shortage
  is one step down, not one at each step until the excess is gone); or where requests wait,
  PSD's last pair of steps drafted longer than they verified by more than the margin, and the
  smaller m costs at most the margin of tokens/s (the drafter is the bottleneck and its cost
  grows with the batch: the seats buy latency, not throughput). Without waiting requests no seat
  is contested and m holds.

Between growing (t <= V + c, or t / (V + c) not rising) and shrinking (t > (1 + margin)(V + c)
and fewer seats within the margin of tokens/s) lies a band where m holds, so a load near either
threshold does not move m at every step. The prices are sim/methods/
mode_rule.ModePrices', PSD's pair of steps at the two even halves each m's running set would make.
"""

from __future__ import annotations

from dataclasses import dataclass

from psdsim.sim.methods.mode_rule import PSD, Half, ModePrices, split_evenly
from psdsim.sim.scenario_values import MAX_M


def m_step(m: int) -> int:
    """How far m moves at once (see the module docstring)."""
    return max(1, m // 4)


@dataclass(frozen=True)
class Observed:
    """What the engine sees before a PSD step."""

    running: int        # requests in the running set, prefilling ones included
    waiting: int        # requests queued for a seat
    pool_blocks: int    # the KV pool's blocks less the admission watermark
    blocks_each: int    # KV blocks a request is expected to hold at its end (see AdaptiveMode)
    preempted: int      # requests the step just run preempted: the KV pool ran out
    ran_out_at: int     # the fewest running requests the pool has run out at in the run (0: never)
    drafting_s: float   # PSD's last two steps that drafted beside their pass: that drafting
    verifying_s: float  # and their passes with the messages beside them (0: no such step yet)


@dataclass(frozen=True)
class MBounds:
    low: int
    high: int   # 0: no bound of its own (m's, MAX_M)


def resized(halves: tuple[Half, Half], requests: int) -> tuple[Half, Half]:
    """The two sub-batches `requests` requests would make, split by count, each holding the
    context (and extra draft rows) the running ones hold per request now."""
    n = halves[0].requests + halves[1].requests
    ctx, rows = halves[0].context + halves[1].context, halves[0].extra_rows + halves[1].extra_rows
    whole = Half(requests, ctx * requests // n, rows * requests // n)
    return split_evenly((whole, Half(0, 0, 0)))


class MRule:
    """The next m from the current one (see the module docstring)."""

    def __init__(self, prices: ModePrices, bounds: MBounds, margin: float) -> None:
        self.prices, self.bounds, self.margin = prices, bounds, margin

    def next_m(self, m: int, seen: Observed, halves: tuple[Half, Half], rate: float) -> int:
        """m for the coming steps; `halves`: PSD's sub-batches as they are (both non-empty)."""
        high = self.bounds.high or MAX_M
        up, down = min(high, m + m_step(m)), max(self.bounds.low, m - m_step(m))
        if seen.preempted:   # the set that ran out within m's seats: fewer; else it was the excess
            return down if seen.running + seen.preempted <= 2 * m else m
        if up > m and seen.running >= 2 * m and self._grows(seen, halves, rate, up):
            return up
        if down < m and self._drafting_exceeds(seen) and self._costs_little(seen, halves, rate, down):
            return down
        return m

    def _speed(self, halves: tuple[Half, Half], rate: float) -> float:
        return self.prices.rates((PSD,), halves, rate)[PSD]

    def _now(self, halves: tuple[Half, Half], rate: float) -> float:
        """Tokens/s at the running set split evenly, as every other m is priced: a refill that
        left the sub-batches uneven is not a reason to move m."""
        return self._speed(resized(halves, halves[0].requests + halves[1].requests), rate)

    def _grows(self, seen: Observed, halves: tuple[Half, Half], rate: float, up: int) -> bool:
        n = halves[0].requests + halves[1].requests
        newcomers = min(seen.waiting, 2 * up - seen.running)
        after = seen.running + newcomers
        if newcomers <= 0 or after * seen.blocks_each > seen.pool_blocks or 0 < seen.ran_out_at <= after:
            return False
        grown = resized(halves, n + newcomers)
        drafting, verifying = self.prices.psd_overlap(grown)
        if drafting > verifying:   # not hidden at the larger m: at least no less hidden than now
            drafting_now, verifying_now = self.prices.psd_overlap(resized(halves, n))
            if drafting * verifying_now > drafting_now * verifying:
                return False
        return self._speed(grown, rate) > self._now(halves, rate) * (1.0 + self.margin)

    def _drafting_exceeds(self, seen: Observed) -> bool:
        return seen.verifying_s > 0.0 and seen.drafting_s > seen.verifying_s * (1.0 + self.margin)

    def _costs_little(self, seen: Observed, halves: tuple[Half, Half], rate: float, down: int) -> bool:
        """Fewer seats at most `margin` slower, where requests wait for them (else the cap binds
        nothing: no seat is contested)."""
        n = halves[0].requests + halves[1].requests
        kept = min(n, 2 * down)
        if not seen.waiting or kept == n:
            return False
        return self._speed(resized(halves, kept), rate) * (1.0 + self.margin) >= self._now(halves, rate)
