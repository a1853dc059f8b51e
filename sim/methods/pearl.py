"""`pearl`: PEARL's post-verify pipelining, batched as MineDraft re-implements it (5 GPUs).

No sub-batches: every step verifies all m running requests while the drafter drafts the next k
tokens for each of them, assuming the drafts being verified will all be accepted (reference
paper.md §4.2 "PEARL baseline inside MineDraft", §10). After the step a request's pre-drafted
tokens are *valid* only if all its drafts were accepted (or, having had no drafts, the draft's
first token matches the target's: probability = its acceptance rate); otherwise they continue a
prefix that was rejected and are stale. As in MineDraft's worker (`_prepare_previous_proposals`),
the pre-drafted tokens are used for every request as long as at least one request's are valid;
when none is valid, the whole batch takes a step without drafts. Stale drafts are scored against
the real sequence like any others (`ParallelMQAScorer.start_score_proposals`). How often one
matches is a property of the models and the text, not of the code, and no source publishes it: a
request whose j-th of k drafts was rejected has its pre-drafted tokens scored k - 1 - j positions
before the ones they were drafted for, after a prefix they did not assume. `pearl_stale` chooses
the model (docs/minedraft-fidelity.md §6): "rejected" (the default) accepts nothing, the lower
bound; "as-fresh" accepts them with the request's own acceptance, the upper bound; "rate" accepts
them at `pearl_stale_acceptance` per token. Either way the accepted drafts are the leading run of
successes, as for fresh drafts. So the more requests share a step, the longer stale drafts linger
before the batch resets, and each rejection costs a request a wasted speculation step. A request
whose stale drafts were all accepted continues with valid ones, as the code's `has_accepted_all`
says.
Drafting ahead runs on vLLM V0's MultiStepWorker, given the requests whose last verification
accepted all their drafts (`get_spec_proposals(mock_execute_model_req,
_seq_with_bonus_token_in_last_step)`), so on an engine that drafts the extra row for each of them
(`extra_draft_rows`) PEARL pays it as SD and PSD do (`draft_rows`, the step's `extra_rows`).
KV: each decode keeps 2k - 1 lookahead slots, as MineDraft's PEARL mode allocates.

`pearl_variant = "per-request"` is the lossless per-request form the reference engine runs
(engine/reference/methods.py): the first token drafted ahead sits at the position of the bonus
token, so it is checked there (accepted with the request's acceptance rate) after the request's
proposals; when it and every proposal pass, the other k - 1 drafted ahead are the request's next
proposals, otherwise it has none next step. Nothing stale is ever scored, and at k = 1 nothing
is ever proposed. MineDraft's form keeps k pre-drafted tokens without checking that position.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import numpy as np

from psdsim.sim.acceptance import MAX_ACCEPTANCE
from psdsim.sim.methods.common import (
    EngineMethod,
    SimContext,
    draft_counts,
    emit_outcome,
    record,
    verify_outcome,
)
from psdsim.sim.methods.passes import TargetPass, booked_step, chunk_work, drafting_of
from psdsim.sim.records import StepRecord
from psdsim.sim.scheduler import StepPlan


class PEARL(EngineMethod):

    def __init__(self, sim: SimContext) -> None:
        super().__init__(sim)
        n = sim.table.capacity
        self.lookahead = 2 * sim.scenario.k - 1
        self.per_request = sim.scenario.pearl_variant == "per-request"
        self.stale_log_acceptance = stale_log_acceptance(sim.scenario.pearl_stale,
                                                         sim.scenario.pearl_stale_acceptance)
        self.drafted = np.zeros(n, dtype=bool)  # pre-drafted tokens exist (valid or stale)
        self.valid = np.zeros(n, dtype=bool)    # ... and continue the request's real prefix
        sim.table.track(self, "drafted")
        sim.table.track(self, "valid")

    def left(self, slots: np.ndarray) -> None:
        self.drafted[slots] = False
        self.valid[slots] = False

    def step(self, plan: StepPlan) -> Generator[Any, Any, None]:
        sim, rec = self.sim, StepRecord()
        k, start = sim.scenario.k, sim.env.now
        slots = plan.decode
        batch = len(slots)
        chunks, context = chunk_work(sim, plan), sim.table.context(slots)
        proposed, use_drafts = self._proposals(plan, slots)
        total = int(proposed.sum())
        tokens = total + batch
        target = TargetPass(sim, batch, tokens, context, chunks)
        # post-verify: draft the next k for everyone while the target verifies
        # V0's MultiStepWorker adds a row for each request whose last verification accepted all
        # its drafts (the set the code passes when drafting ahead), where the engine does
        beside = None
        if batch:
            beside = drafting_of(sim, rec, slots, k, context + batch * k, "draft ahead")
            target.label("verify", k=k, drafts_used=use_drafts)
        else:
            target.label("prefill")
        yield from booked_step(sim, plan, rec, target, start, bool(batch), beside, drafter_waits=bool(batch))
        self._verify(slots, proposed, total, rec)
        rec.parallelised, rec.verified, rec.drafted = batch > 0, batch, batch
        rec.scored = tokens if batch else 0
        record(sim, plan, start, rec)

    def _proposals(self, plan: StepPlan, slots: np.ndarray) -> tuple[np.ndarray, bool]:
        """Drafts each request has scored, and whether the pre-drafted tokens are used at all."""
        k = self.sim.scenario.k
        if self.per_request:
            return draft_counts(plan, slots, self.valid[slots] * (k - 1)), len(slots) > 0
        use_drafts = len(slots) > 0 and bool(self.valid[slots].any())
        proposed = self.drafted[slots] * k if use_drafts else np.zeros(len(slots), dtype=np.int64)
        return draft_counts(plan, slots, proposed), use_drafts

    def _verify(self, slots: np.ndarray, proposed: np.ndarray, total: int, rec: StepRecord) -> None:
        """Score the drafts (stale ones as `pearl_stale` says) and note whose pre-drafted tokens
        continue the real sequence: the code's `has_accepted_all`, all drafts accepted (or, with
        none, the first drafted token matching the target's)."""
        sim, table = self.sim, self.sim.table
        if not len(slots):
            return
        if total and self.stale_log_acceptance is not None and not self.per_request:
            # one uniform per request as for fresh drafts; a stale request's leading run is drawn
            # with the stale acceptance (ln 0 = -inf: none)
            valid = self.valid[slots]
            log_acceptance = np.where(valid, table.log_acceptance[slots], self.stale_log_acceptance)
            emit_outcome(sim, rec, slots, proposed, total, sim.acceptance.accepted(log_acceptance, proposed))
        else:
            verify_outcome(sim, rec, slots, proposed, total)
        first_match = first_token_matches(sim, slots)
        if self.per_request:  # every proposal passed, then the first token drafted ahead
            self.valid[slots] = (table.last_accepted == proposed) & first_match
        else:
            self.valid[slots] = has_accepted_all(sim, proposed, first_match)
            self.drafted[slots] = True


def first_token_matches(sim: SimContext, slots: np.ndarray) -> np.ndarray:
    """Whether the first token drafted ahead during the verification just back matched the
    token the target emitted there: a trial per request, at its acceptance."""
    return sim.acceptance.bernoulli(sim.table.log_acceptance[slots])


def has_accepted_all(sim: SimContext, drafted: np.ndarray, first_match: np.ndarray) -> np.ndarray:
    """MineDraft's `has_accepted_all`: whose tokens drafted ahead during the verification just
    back continue the request's real sequence, as the drafting assumed: all the `drafted` drafts
    it held accepted, or, where it held none, `first_match` (first_token_matches)."""
    return np.where(drafted > 0, sim.table.last_accepted == drafted, first_match)


def stale_log_acceptance(model: str, rate: float) -> float | None:
    """ln(per-token acceptance) of a stale draft under `pearl_stale` = `model`; None: the
    request's own (as-fresh). "rejected" is rate 0 (ln 0 = -inf: every stale draft rejected)."""
    if model == "as-fresh":
        return None
    rate = rate if model == "rate" else 0.0
    return float(np.log(min(rate, MAX_ACCEPTANCE))) if rate > 0 else -np.inf
