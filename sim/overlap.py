"""Contention: drafting and a target pass that slow each other down while both run.

When the drafter and the verifier share something (memory bandwidth, a last-level cache, the
host cores of the reference engine's two CPU processes; on GPUs, a PCIe root complex or host
threads), each runs slower while the other one computes. A fitted profile may carry the measured
slowdown factors (`Profile.contention`: `draft` and `verify`, each the ratio of a pass's time
while the other side computes to its time alone, measured by a microbenchmark; absent = 1, no
contention). PSD and PEARL overlap the two every parallelised step, so their steps pay it; the
sequential methods never do.

A profile may also carry how much slower a side's work runs after that side idled (`after_idle`:
per side, points (idle seconds, factor), measured by the same microbenchmark): where a process
waits long enough for a shared cache to lose its working set, or a host to lower a core's clock,
the work that follows pays for it. The verifier's pass is scaled by the factor of the idle time
before it; the driver's work after waiting for the verifier (rejection sampling, then its next
drafting) by the factor of that wait. Only where the drafter has a device of its own: one
process never waits for another.

The overlap is priced exactly for two rates: drafting starts at t = 0 and the target pass at
t = s (after the step's inputs crossed the link). While both run, drafting progresses at
1/f_draft of its speed alone and the pass at 1/f_verify of its own; whichever finishes first
leaves the other to finish alone at full speed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from psdsim.sim.costs import StepCost


@dataclass(frozen=True)
class Slowdowns:
    """What a run pays of a profile's measured slowdowns, resolved once (sim/run.py): the
    (draft, verify) factors while both run (None: none), and the verifier's and the driver's
    slowdown after idling (None: none; only where the drafter has a device of its own)."""

    overlap: tuple[float, float] | None = None
    verifier_idle: Callable[[float], float] | None = None
    driver_idle: Callable[[float], float] | None = None


NO_SLOWDOWNS = Slowdowns()


def slowdowns(cost: StepCost, dedicated_drafter: bool) -> Slowdowns:
    """The slowdowns a cost model carries (a fitted profile's `contention` factors and
    `after_idle` curves; the analytic model has none)."""
    factors, after_idle = cost.contention, cost.after_idle
    idle = after_idle is not None and dedicated_drafter
    return Slowdowns(
        overlap=None if tuple(factors) == (1.0, 1.0) else (float(factors[0]), float(factors[1])),
        verifier_idle=(lambda idle_s: after_idle("verify", idle_s)) if idle else None,
        driver_idle=(lambda idle_s: after_idle("draft", idle_s)) if idle else None)


def overlapped(draft_s: float, verify_s: float, start_s: float, f_draft: float,
               f_verify: float) -> tuple[float, float]:
    """(drafting's wall time from t = 0, the target pass's wall time from its start at
    `start_s`) for `draft_s` of drafting and `verify_s` of target pass, alone-times."""
    if draft_s <= 0 or verify_s <= 0 or (f_draft == 1.0 and f_verify == 1.0):
        return draft_s, verify_s
    if draft_s <= start_s:  # drafting is over before the pass starts
        return draft_s, verify_s
    left = draft_s - start_s                       # drafting still to do when the pass starts
    if left * f_draft <= verify_s * f_verify:      # drafting finishes first
        both = left * f_draft
        return start_s + both, both + (verify_s - both / f_verify)
    both = verify_s * f_verify                     # the pass finishes first
    return start_s + both + (left - both / f_draft), both


def idle_factor(points: tuple[tuple[float, float], ...], idle_s: float) -> float:
    """The slowdown after `idle_s` of idling: linear between the measured points (idle seconds
    ascending, with (0, 1) implied), the last point's factor beyond them."""
    if not points or idle_s <= 0:
        return 1.0
    x0, y0 = 0.0, 1.0
    for x, y in points:
        if idle_s <= x:
            return y0 + (y - y0) * (idle_s - x0) / (x - x0) if x > x0 else y
        x0, y0 = x, y
    return y0
