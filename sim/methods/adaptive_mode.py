"""`adaptive`: MineDraft's deployment (the verifier group, one drafter GPU, 2m requests) whose
engine runs each step as PSD, SD or AR, whichever its rule chooses (sim/methods/mode_rule.py). It
is a policy over the existing steps, not a step of its own:

- PSD: the PSD step (sim/methods/pipelined.py), MineDraft's two sub-batches.
- SD: the SD step over every decoding request, drafted on the drafter GPU and verified across the
  link (sd-5gpu's layout): the step MineDraft's PSD itself falls back to once a sub-batch empties.
- AR: the same step with no drafts, one target pass; the draft model runs one pass over the batch
  beside it, so that its KV keeps up with the tokens the target emits and speculation may resume
  at any step (vLLM V0's `SpecDecodeWorker._run_no_spec` sends a step without speculation to the
  proposer too, "so that the KV cache is consistent between the two"). A verification without
  drafts there is no wasted one. That pass also gives the draft model's distribution q at the
  position the target fills, so the engine knows the probability sum(min(p, q)) that a draft
  would have been accepted there (Leviathan et al. 2023): the rule's acceptance estimate keeps
  learning from each request's rate, taken at its expectation, while nothing is drafted.

What a switch does:

- KV: every mode holds context + k slots per decoding request (vLLM V0's scheduler allocates its
  lookahead slots whether the worker speculates or not) and keeps both models' KV current, so a
  switch frees, claims and recomputes nothing.
- Drafts in flight: in PSD the sub-batch drafted beside the last pass holds k drafts each. Leaving
  PSD drains them: the step after the decision is PSD's with nothing drafted beside its pass (as
  after a sub-batch empties), and the new mode starts once no draft is held. None is thrown away;
  the other sub-batch waits that one step.
- Into PSD (from SD or AR, or PSD's own fallback once a sub-batch emptied, the tail): the running
  requests are split into two sub-batches by the balance rule, as before decoding starts
  (`regroup`). Nothing holds drafts, so the first PSD step is an init step that drafts the
  sub-batch it verifies first: the switch's cost, one drafting nothing hides.
- SD and AR: nothing is held, nothing to do.

With `adaptive_m`, while PSD runs and its mode holds, m's rule (sim/methods/m_rule.py) also sets
the scheduler's running cap 2m before each step; the step table's `m` column is the m in force.

The rule decides before each step is planned (the scheduler's `planning` hook), so the hooks the
plan asks answer for the mode that runs it. The step table gets two columns: `mode` (psd, sd or
ar: which step ran) and `switch` (the rule changed the mode, or re-split PSD's sub-batches, when
that decode step, or a prefill-only step just before it, was planned; a PSD step with `switch`
and nothing drafted beside it drains).
"""

from __future__ import annotations

from array import array
from collections import deque
from collections.abc import Generator
from typing import Any

import numpy as np

from psdsim.sim.costs import Chunks
from psdsim.sim.methods.common import EngineMethod, SimContext
from psdsim.sim.methods.draft_length import AdaptiveLength
from psdsim.sim.methods.m_rule import MBounds, MRule, Observed
from psdsim.sim.methods.mode_rule import AR, PSD, SD, Half, ModePrices, chosen, split_evenly
from psdsim.sim.methods.passes import Drafting, drafting_s
from psdsim.sim.methods.pipelined import PipelinedSD
from psdsim.sim.methods.sd import StandardSD
from psdsim.sim.methods.sub_batching import BatchManagerSubBatching
from psdsim.sim.records import STEP_COLUMNS, StepRecord
from psdsim.sim.requests import FINISHED
from psdsim.sim.scenario import Scenario
from psdsim.sim.scheduler import StepPlan

# the last step's figures m's rule observes, by their place in a step row
PREEMPTED, PARALLELISED, DRAFTED, DRAFT_S, PREP_S, VERIFY_S, COMM_S, RETURN_S = map(STEP_COLUMNS.index, (
    "preempted", "parallelised", "drafted", "draft_s", "prep_s", "verify_s", "comm_s", "return_s"))
MODE_NAMES = (PSD, SD, AR)   # the `mode` column's values; the run keeps their indices
SYNC = "draft (KV sync)"     # the AR mode's draft pass on the timeline


class ModeLength(AdaptiveLength):
    """k drafts per request while the mode speculates, none in AR; every verification of either
    step updates the one acceptance estimate the rule reads."""

    speculating = True

    def k(self, slots: np.ndarray, context: int, chunks: Chunks, parallel: bool,
          over_link: bool = True) -> int:
        return self.width if self.speculating else 0


class ModeSD(StandardSD):
    """The SD and AR modes' step: SD's, on the adaptive deployment's GPUs."""

    def _beside(self, rec: StepRecord, slots: np.ndarray, k: int, context: int) -> Drafting | None:
        """With no drafts (AR), the draft model's one pass over the batch keeps its KV current."""
        if k or not len(slots):
            return None
        return Drafting(drafting_s(self.sim, rec, slots, 1, context), SYNC, len(slots), 1)


class AdaptiveMode(EngineMethod):

    @staticmethod
    def running_cap(s: Scenario) -> int:
        return 2 * s.m

    def __init__(self, sim: SimContext) -> None:
        super().__init__(sim)
        s = sim.scenario
        self.psd, self.sd = PipelinedSD(sim), ModeSD(sim)
        sub_batching = self.psd.sub_batching
        assert isinstance(sub_batching, BatchManagerSubBatching)
        self.sub_batching = sub_batching
        self.length = ModeLength(sim, s.k)
        self.psd.draft_length = self.sd.draft_length = self.length   # one estimate for both steps
        self.prices = ModePrices(sim, s.k)
        self.allowed, self.margin = s.allowed_modes, s.adaptive_margin
        self.mode = PSD
        self.pending: str | None = None   # the mode to enter once PSD's drafts in flight are verified
        self.switched = False             # the rule switched while the coming step was planned
        self.modes, self.switches = bytearray(), bytearray()   # per step: its mode's index, `switch`
        # adaptive_m: m's rule, the m in force, and PSD's last two steps that drafted beside their
        # pass: that drafting and the pass (a pair, one step of each sub-batch, as the theory's)
        self.m_rule = (MRule(self.prices, MBounds(s.adaptive_m_min, s.adaptive_m_max), self.margin)
                       if s.adaptive_m else None)
        self.m, self.ms = s.m, array("H")
        self.overlaps: deque[tuple[float, float]] = deque(maxlen=2)
        self.finished = self.finished_blocks = 0   # requests finished and the KV blocks they ended with
        self.ran_out_at = 0                         # the fewest running requests KV ran out at (0: never)

    # -- scheduler hooks: PSD's sub-batches follow the running set in every mode ----------------

    def admitted(self, slots: np.ndarray, mixed: bool) -> None:
        self.psd.admitted(slots, mixed)

    def graduated(self, slots: np.ndarray) -> None:
        self.psd.graduated(slots)

    def resumed(self, slots: np.ndarray) -> None:
        self.psd.resumed(slots)

    def left(self, slots: np.ndarray) -> None:
        if self.m_rule is not None:
            done = slots[self.sim.table.state[slots] == FINISHED]
            self.finished += len(done)
            self.finished_blocks += int(self.sim.scheduler.kv.held[done].sum())
        self.psd.left(slots)

    def target_tokens(self, slots: np.ndarray) -> np.ndarray:
        if self.mode == PSD:
            return self.psd.target_tokens(slots)
        if self.mode == AR:
            return np.ones(len(slots), dtype=np.int64)
        return super().target_tokens(slots)

    def computes_chunks(self, prefill: np.ndarray, decode: np.ndarray) -> np.ndarray | None:
        return self.psd.computes_chunks(prefill, decode) if self.mode == PSD else None

    def planning(self) -> None:
        """The rule, before the step is planned (see the module docstring)."""
        sb = self.sub_batching
        if self.pending is not None:
            if not sb.have_previous:   # the drafts in flight are verified: the new mode starts
                self._enter(self.pending)
                self.pending = None
            return
        members = sb.members
        n0, n1 = len(members[0]), len(members[1])
        if not n0 + n1:
            return
        fallback = self.mode == PSD and not (n0 and n1)
        if fallback and sb.have_previous:
            return   # PSD's step after a sub-batch emptied verifies the drafts in flight
        halves = self._halves()
        if not (self.mode == PSD and not fallback):   # the split a switch into PSD makes, on average
            halves = split_evenly(halves)
        current = SD if fallback else self.mode   # PSD's fallback step is SD's
        rates = self.prices.rates(dict.fromkeys((*self.allowed, current)), halves, self.length.estimate.rate)
        best = chosen(current, rates, self.margin)
        if best == current:
            if self.m_rule is not None and self.mode == PSD and not fallback:
                self._resize(halves)
            return
        self.switched = True
        if best == PSD:
            sb.regroup(self.sim.scheduler.running, self.sim.table.state)
            self._enter(PSD)
        elif self.mode == PSD and sb.have_previous:
            self.pending, sb.draining = best, True
        else:
            self._enter(best)

    def _halves(self) -> tuple[Half, Half]:
        """PSD's two sub-batches as they are (sizes, contexts, V0's extra draft rows)."""
        sim, members = self.sim, self.sub_batching.members

        def half(slots: np.ndarray) -> Half:
            extra = sim.all_accepted[slots] if sim.all_accepted is not None else ()
            return Half(len(slots), sim.table.context(slots), int(np.count_nonzero(extra)))

        return half(members[0]), half(members[1])

    def _resize(self, halves: tuple[Half, Half]) -> None:
        """m's rule (sim/methods/m_rule.py), acting through the scheduler's running cap."""
        assert self.m_rule is not None
        sched = self.sim.scheduler
        kv, running, last = sched.kv, sched.running, self.sim.steps.last
        s = self.sim.scenario
        preempted = 0 if last is None else last[PREEMPTED]
        if preempted:
            ran_out = len(running) + preempted
            self.ran_out_at = min(self.ran_out_at or ran_out, ran_out)
        each = (-(-self.finished_blocks // self.finished) if self.finished
                else int(kv.blocks_for(s.max_model_len + self.lookahead)))
        seen = Observed(running=len(running), waiting=len(sched.waiting),
                        pool_blocks=kv.total - kv.watermark, blocks_each=each,
                        preempted=preempted, ran_out_at=self.ran_out_at,
                        drafting_s=sum(o[0] for o in self.overlaps),
                        verifying_s=sum(o[1] for o in self.overlaps))
        self.m = self.m_rule.next_m(self.m, seen, halves, self.length.estimate.rate)
        sched.max_running = 2 * self.m

    def _enter(self, mode: str) -> None:
        self.mode = mode
        self.length.speculating = self.sim.speculating = mode != AR
        self.sub_batching.draining = False

    # -- a step -------------------------------------------------------------------------------

    def step(self, plan: StepPlan) -> Generator[Any, Any, None]:
        self.modes.append(MODE_NAMES.index(self.mode))
        # a switch decided while a prefill-only step was planned shows on the next decode step,
        # the one it changes (the drain, the split)
        decodes = len(plan.decode) > 0
        self.switches.append(self.switched and decodes)
        if decodes:
            self.switched = False
        if self.m_rule is not None:
            self.ms.append(self.m)
        yield from (self.psd if self.mode == PSD else self.sd).step(plan)
        last = self.sim.steps.last
        if self.mode == PSD and last is not None and last[PARALLELISED] and last[DRAFTED]:
            beside = last[VERIFY_S] + last[COMM_S] - last[RETURN_S]   # the pass and its inputs' messages
            self.overlaps.append((last[DRAFT_S] - last[PREP_S], beside))
        if self.mode == AR and len(plan.decode):   # the estimate keeps learning without drafts
            self.length.estimate.expect(self.sim.table.acceptance[plan.decode])

    def step_columns(self) -> dict[str, np.ndarray]:
        codes = np.frombuffer(bytes(self.modes), dtype=np.uint8)
        columns = {"mode": np.array(MODE_NAMES)[codes],
                   "switch": np.frombuffer(bytes(self.switches), dtype=bool).copy()}
        if self.m_rule is not None:
            columns["m"] = np.frombuffer(self.ms.tobytes(), dtype=np.uint16).copy()
        return columns
