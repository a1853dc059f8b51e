"""PSD's tail pre-drafted (`tail = "pre-draft"`, `"pre-draft-pearl"`): what two-sub-batch PSD
does, beyond the paper, once one of its sub-batches is empty.

MineDraft's worker verifies the remaining sub-batch whole and drafts nothing beside the pass
(docs/reference/paper.md §4.2, the corner case), so every later step drafts, then verifies:
sequential SD, the tail effect (`tail = "sd"`, the default, which needs nothing here). The
paper's limitations name the mitigation this policy builds: "borrow from PEARL and draft for the
remaining batch's in-flight requests during its verification, re-drafting on failure". Our
reading, step by step:

- Beside each pass that verifies the remaining sub-batch, the driver drafts that sub-batch's
  next k tokens on a mock sequence that assumes every draft being verified is accepted, as
  MineDraft's PEARL mode drafts ahead (sim/methods/pearl.py): the step's drafting (steps.csv
  `drafted`, `draft_s`; the timeline's `pre-draft B<n>`), priced as any drafting beside a pass.
- When the pass is back, a request keeps its pre-drafts where they continue its real sequence:
  it accepted every draft it held (MineDraft's `has_accepted_all`; with none held, the draft's
  first token matching the target's). Kept pre-drafts are scored at the next step like fresh
  drafts, at the request's acceptance, as psdsim scores PEARL's valid ones
  (docs/minedraft-fidelity.md §6 notes that the first of them was drafted for the bonus token's
  position: an optimistic reading, PEARL's).
- The others' pre-drafts continue a rejected prefix: they are thrown away (`pre_drafts_wasted`),
  and the request is drafted again before its next verification, by the driver before that pass
  (`re-draft B<n>`, not parallelised). Before the pass, not beside it: in the tail no other pass
  runs to hide it behind, and the drafts must follow the token the last pass emitted.
  `tail = "pre-draft-pearl"` answers a rejection as MineDraft's PEARL mode does instead: the
  request is verified with 0 proposals (one token, a wasted verification, no drafting before
  the pass), and its next pre-drafts are kept if their first token matches the target's. So
  re-drafting spends drafter time on the critical path to keep every request speculating, and
  PEARL's answer spends a verification on one token.

So a tail step costs max(draft, link + verify) + ... when every request kept its pre-drafts, and,
re-drafting, draft + max(draft, link + verify) + ... when one did not: SD's draft + verify where
drafting is the shorter, more where it is the longer. KV: the mock sequences write the draft KV
of the k drafts and k - 1 pre-drafts, so a tail step's decodes hold context + 2k - 1 slots, as
MineDraft's PEARL mode allocates. When refills fill the other sub-batch again, the next step
verifies the pre-drafted one (it holds the drafts) and drafts the other beside it: the pipeline
resumes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from psdsim.sim.costs import NO_CHUNKS
from psdsim.sim.methods.passes import Drafting, drafting_of
from psdsim.sim.methods.pearl import first_token_matches, has_accepted_all
from psdsim.sim.methods.sub_batching import EMPTY
from psdsim.sim.records import StepRecord

if TYPE_CHECKING:
    from psdsim.sim.methods.pipelined import PipelinedSD


class PreDraftTail:
    """The tail pre-drafted (see the module docstring), for a `PipelinedSD` on MineDraft's
    pipeline: it drafts beside the tail's passes, judges the pre-drafts once a pass is back, and
    names the requests to draft again."""

    def __init__(self, psd: PipelinedSD, redraft: bool) -> None:
        self.psd = psd
        self.redraft = redraft     # a request whose pre-drafts were thrown away is drafted again
        self.width = psd.draft_length.width
        self.pre_drafted = False   # the last decode step pre-drafted its verified sub-batch
        self.slots = EMPTY         # ... of the step under way: the requests pre-drafted,
        self.held = EMPTY          # the drafts each held when its pass started,
        self.k = 0                 # and the tokens pre-drafted for each

    def lookahead(self) -> int:
        """KV slots beyond the context a decode needs in the step being planned: 2k - 1 in a tail
        step (the draft KV of the drafts and of the pre-drafts after them), else k."""
        members = self.psd.sub_batching.members
        tail = (len(members[0]) == 0) != (len(members[1]) == 0)
        return 2 * self.width - 1 if tail else self.width

    def undrafted(self, slots: np.ndarray) -> np.ndarray:
        """The verified `slots` to draft again before the pass: after a step that pre-drafted,
        those without drafts (their pre-drafts were thrown away, or they joined since), where
        the policy re-drafts; none otherwise (a request without drafts is verified without)."""
        if not (self.pre_drafted and self.redraft):
            return EMPTY
        return slots[self.psd.proposals[slots] == 0]

    def pre_draft(self, v: int, slots: np.ndarray, context: int, scored: int, rec: StepRecord) -> Drafting:
        """The drafting beside the pass that verifies sub-batch `v` alone: its next k tokens on
        mock sequences holding the `scored` drafts being verified too (their KV included)."""
        psd = self.psd
        self.slots, self.held = slots, psd.proposals[slots]
        k = self.k = psd.draft_length.k(slots, context, NO_CHUNKS, parallel=True)
        rec.drafted = len(slots)
        return drafting_of(psd.sim, rec, slots, k, context + scored, "pre-draft", v)

    def verified(self, rec: StepRecord) -> None:
        """A decode step's pass is back (its requests' drafts used up): the requests that
        accepted all they held keep their pre-drafts, unless they finished; the rest are
        counted as waste."""
        slots, self.slots = self.slots, EMPTY
        self.pre_drafted = bool(len(slots))
        if not len(slots):
            return
        psd, table, k, held = self.psd, self.psd.sim.table, self.k, self.held
        first_match = np.zeros(len(slots), dtype=bool)
        none = held == 0
        if none.any():   # a trial only where it decides, so the acceptance draws stay the fallback's
            first_match[none] = first_token_matches(psd.sim, slots[none])
        keep = has_accepted_all(psd.sim, held, first_match) & (table.kv_len[slots] < table.final_len[slots])
        psd.proposals[slots] = np.where(keep, k, 0)
        rec.pre_drafts_wasted = k * (len(slots) - int(np.count_nonzero(keep)))
