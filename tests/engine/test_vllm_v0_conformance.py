"""Scheduler conformance: the real vLLM 0.9.2 V0 `Scheduler` against psdsim's `vllm-v0` scheduler.

Both are fed the same requests (prompt and output lengths, arrival times, n, client cancels) and
the same KV pool (GPU blocks, CPU swap blocks, block size 16), and stepped with one token per
request per step (AR decoding; each step lasts one time unit). Every step is compared: which
requests run and in what order, whether the step is prefill-only, which requests were preempted
by recompute and which swapped out or in, the blocks in use, which requests finished or were
aborted. On the vLLM side the host code is the engine's own: `Scheduler.schedule()`, the
`SingleStepOutputProcessor` with its `StopChecker` (appends, max_tokens, freeing), the
`ParallelSampleSequenceGroup` fan-out of n > 1, `abort_seq_group`; only the model's sampled token
is synthetic.

Opt-in: it runs only where vLLM 0.9.2 is installed (benchmarks/install_vllm_v0_host.sh makes such
a venv; docs/engines.md, "vLLM 0.9.2's host side"), and skips with that reason elsewhere:

    /work/venv-vllm092/bin/python -m pytest tests/engine/test_vllm_v0_conformance.py -q
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from tests.helpers.scheduler_conformance import (
    ABORTS,
    MATCHING,
    OFFLINE_LOOSE,
    OFFLINE_TIGHT,
    PARALLEL,
    POISSON_TIGHT,
    SWAP_TIGHT,
    TIGHT,
    VLLM_VERSION,
    Case,
    PsdsimSide,
    StepView,
    VllmSide,
    exercised,
    installed_vllm,
    run_side,
)

pytestmark = pytest.mark.skipif(
    installed_vllm() != VLLM_VERSION,
    reason=f"opt-in: needs vLLM {VLLM_VERSION} (found {installed_vllm()}); "
           "install it with benchmarks/install_vllm_v0_host.sh (docs/engines.md)")


# -- psdsim's side ---------------------------------------------------------------------------


# -- vLLM's side -----------------------------------------------------------------------------


# -- the comparison --------------------------------------------------------------------------


FIELDS = ("time", "scheduled", "prefill", "recomputed", "swapped_out", "swapped_in", "blocks",
          "finished", "aborted")


@dataclass
class Comparison:
    vllm: list[StepView]
    psdsim: list[StepView]

    @property
    def mismatches(self) -> list[tuple[int, str, object, object]]:
        """(step, field, vLLM's, psdsim's) for every field that differs, steps beyond the shorter
        run counted as one mismatch each."""
        out = []
        shorter = min(len(self.vllm), len(self.psdsim))
        for i, (a, b) in enumerate(zip(self.vllm[:shorter], self.psdsim[:shorter], strict=True)):
            out += [(i, f, getattr(a, f), getattr(b, f)) for f in FIELDS if getattr(a, f) != getattr(b, f)]
        longer = max(len(self.vllm), len(self.psdsim))
        out += [(i, "steps", len(self.vllm), len(self.psdsim)) for i in range(shorter, longer)]
        return out

    def summary(self) -> str:
        bad = self.mismatches
        first = f"; first: step {bad[0][0]} {bad[0][1]}: vLLM {bad[0][2]} psdsim {bad[0][3]}" if bad else ""
        return f"{len(self.vllm)} steps compared, {len({m[0] for m in bad})} steps differ{first}"


def compare(case: Case) -> Comparison:
    return Comparison(run_side(VllmSide(case)), run_side(PsdsimSide(case)))


# -- workloads -------------------------------------------------------------------------------


CHUNKED = replace(OFFLINE_LOOSE, name="offline, KV loose, chunked prefill", chunked=True, budget=256)

CHUNKED_TIGHT = replace(OFFLINE_TIGHT, name="offline, KV tight, chunked prefill", chunked=True,
                        budget=256)

# Where psdsim's vllm-v0 scheduler still departs from vLLM 0.9.2 (docs/engines.md, "Scheduler
# conformance"), with chunked prefill only.
ROW_ORDER = "vLLM lists new prompts before the continuing chunks"
RUNNING_ORDER = "vLLM's victim is the last running request, a prompt mid-prefill included"


def _only_row_order(ours: StepView, theirs: StepView) -> bool:
    """The same step but for the order of the scheduled requests."""
    return (sorted(ours.scheduled) == sorted(theirs.scheduled)
            and replace(ours, scheduled=()) == replace(theirs, scheduled=()))


def divergence(case: Case, ours: StepView, theirs: StepView) -> str:
    """Name the known departure a diverging step shows. ROW_ORDER: vLLM's
    `_schedule_chunked_prefill` lists the newly admitted prompts before the continuing chunks;
    psdsim after them (the order in which prompts complete orders PSD's sub-batch members).
    RUNNING_ORDER: vLLM's `Scheduler._schedule_running` walks the running queue (decodes, then
    prompts mid-prefill; each asks `can_append_slots`) and preempts from its end, so the victim
    may be a prompt whose chunk psdsim schedules; psdsim picks its victims among the decodes."""
    if case.chunked and _only_row_order(ours, theirs):
        return ROW_ORDER
    ours_out, theirs_out = ours.recomputed + ours.swapped_out, theirs.recomputed + theirs.swapped_out
    if case.chunked and ours_out and theirs_out and ours_out != theirs_out \
            and set(theirs_out) <= set(ours.scheduled) and ours.prefill:
        return RUNNING_ORDER
    return f"unexplained: vLLM {theirs} psdsim {ours}"


def departures(case: Case, result: Comparison) -> list[str]:
    """The known departure each diverging step shows, in step order."""
    steps = sorted({m[0] for m in result.mismatches})
    shorter = min(len(result.vllm), len(result.psdsim))
    return [divergence(case, result.psdsim[i], result.vllm[i]) if i < shorter else "one run ended first"
            for i in steps]


@pytest.mark.parametrize("case", MATCHING, ids=[c.name for c in MATCHING])
def test_every_step_matches_vllm(case):
    """KV loose or tight, recompute or swap, n = 2, aborts: psdsim's full-pool preemption
    (`can_append_slots`) and swap-in (`can_swap_in`) follow vLLM's block counts."""
    result = compare(case)
    assert result.mismatches == [], result.summary()


def test_with_chunked_prefill_and_ample_kv_only_the_row_order_differs():
    """The whole-prompt blocks (`can_allocate`, `allocate`) match: every step runs the same
    requests, with the same blocks in use."""
    result = compare(CHUNKED)
    assert set(departures(CHUNKED, result)) == {ROW_ORDER}, result.summary()


def test_the_chunked_tight_run_diverges_first_where_a_known_departure_says():
    result = compare(CHUNKED_TIGHT)
    shown = [d for d in departures(CHUNKED_TIGHT, result) if d != ROW_ORDER]
    assert shown[0] == RUNNING_ORDER, result.summary()


@pytest.mark.parametrize("case, wanted", [
    (OFFLINE_TIGHT, {"recompute"}), (POISSON_TIGHT, {"recompute"}), (SWAP_TIGHT, {"swap"}),
    (PARALLEL, {"recompute"}), (ABORTS, {"recompute", "abort"}), (CHUNKED_TIGHT, {"recompute"})],
    ids=[c.name for c in [*TIGHT, CHUNKED_TIGHT]])
def test_the_tight_workloads_preempt_and_abort_in_vllm(case, wanted):
    assert wanted <= exercised(run_side(VllmSide(case)))
