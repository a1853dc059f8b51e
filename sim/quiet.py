"""Quiet stretches: runs of decode steps the scheduler plans at once, for a method to price.

Between one request's admission or end and the next, AR's steps (sim/methods/ar.py) are the same
decode step over the same running set, each request one token longer than at the step before,
with no draw of chance. `plan_stretch` plans such a stretch at once from its first plan: how many
steps it may run (it stops before a step that would end a request, the normal step does that
one, or whose KV growth the pool would refuse), the KV each later plan would hold, and each
later plan as the scheduler would make it, unless a request could be admitted by then. The
method prices and records each step and stops after one at whose end a client cancels
(`cancel_due`); `settle` then commits what the steps changed, once for the whole stretch.
The results are those of planning each step, bit for bit (tests/sim/test_quiet_stretches.py).
"""

from __future__ import annotations

import numpy as np

from psdsim.sim.scheduler import EngineHooks, Scheduler, StepPlan

# Requests x steps a quiet stretch plans at once (KVPools.ahead holds a matrix of that size, 8 MiB);
# a longer stretch goes on as another one.
STRETCH_CELLS = 1 << 20


class QuietStretch:
    """Up to `steps` decode steps over `slots`, the first one planned as `first`."""

    __slots__ = ("first", "held", "lengths", "sched", "slots", "steps", "used")

    def __init__(self, sched: Scheduler, first: StepPlan, lengths: np.ndarray, steps: int,
                 held: np.ndarray, used: list[int]) -> None:
        self.sched, self.first, self.slots = sched, first, first.decode
        self.lengths = lengths   # each request's cached tokens when the stretch starts
        self.steps = steps
        self.held, self.used = held, used   # KV blocks each holds, and in use, after plan 2, 3, ...

    def plan(self, step: int, now: float) -> StepPlan | None:
        """The plan of step `step` (0: the first) at `now`; None where a request could be admitted
        by then (the stretch ends: the engine loop plans that step)."""
        if not step:
            return self.first
        sched = self.sched
        sched.table.arrive_until(now)
        if sched.may_admit():
            return None
        plan = StepPlan()
        plan.decode, plan.kv_blocks, plan.waiting = self.slots, self.used[step - 1], len(sched.waiting)
        return plan

    def cancel_due(self, now: float) -> bool:
        """Whether a client's cancel falls due by `now` (the stretch ends after this step)."""
        cancels = self.sched.table.cancels
        return bool(cancels) and cancels[0][0] <= now

    def settle(self, done: int, now: float, method: EngineHooks, last: StepPlan) -> None:
        """The stretch ran `done` steps, the last one planned as `last`, ending at `now`: each
        request is `done` tokens longer and holds the KV its last plan gave it; the cancels due
        at the last step's end are closed as the engine loop would close that step."""
        sched, slots = self.sched, self.slots
        sched.table.kv_len[slots] = self.lengths + done
        if done > 1:
            sched.kv.settle(slots, self.held[done - 2], self.used[done - 2], self.lengths + done - 1)
        if self.cancel_due(now):
            sched.close_step(last, now, method)


def plan_stretch(sched: Scheduler, plan: StepPlan, lookahead: int) -> QuietStretch | None:
    """The quiet stretch that starts with `plan` (already planned), its requests growing their KV
    to context + `lookahead`; None where `plan` does not start one of two steps or more."""
    if not sched.quiet(plan):
        return None
    table, slots = sched.table, plan.decode
    lengths = table.kv_len[slots]
    steps = int((table.final_len[slots] - lengths).min()) - 1   # the next step ends a request
    steps = min(steps, STRETCH_CELLS // len(slots))   # KVPools.ahead's matrix stays small
    if steps < 2:
        return None
    held, used = sched.kv.ahead(slots, lengths + 1, steps - 1, lookahead)
    return QuietStretch(sched, plan, lengths, min(steps, len(used) + 1), held, used)
