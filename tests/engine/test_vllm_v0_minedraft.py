"""Sub-batch conformance: MineDraft's patched vLLM 0.9.2 scheduler against psdsim's PSD sub-batching.

MineDraft's plugin patches vLLM's V0 `Scheduler` (`SchedulerPatch` in
minedraft/plugin/core/scheduler.py): each request admitted, swapped in or preempted gets or gives
back a `batch_flag` (`_get_next_batch_flag`, `_recycle_batch_flag`, `_balance_counter`), and
`_skip_batch_flag` flips after each decode step; its worker (`ParallelSpecDecodeWorker`) verifies
the decoding requests whose flag equals its `_send_batch_flag` and drafts the others, flips the
flag when it drafted some, and verifies everything, resetting the flag to True, when one
sub-batch is empty. psdsim's side is its `vllm-v0` scheduler with the PSD method's hooks into
`BatchManagerSubBatching` (sim/methods/sub_batching.py, sim/batches.py), the way
`PipelinedSD` wires them.

Both are fed the workloads of tests/engine/test_vllm_v0_conformance.py with k = 3 lookahead slots and
2m running seats (MineDraft's `set_max_num_seqs_for_psd(max_num_seqs * 2)`), and stepped one time
unit a step: the verified requests keep 1 + ((request + time) mod (k + 1)) tokens (the same on both
sides, so that requests end at different steps), the drafted ones none (the worker pads their rows
with -1, which vLLM's `MultiStepOutputProcessor` drops). Every step is compared: what the
conformance suite compares (requests run, prompt-only steps, preemptions, swaps, blocks in use,
finishes, aborts) and each scheduled request's flag, the requests verified and those drafted, and
the blocks each running request holds. MineDraft's skipped slot appends (`_has_deferred_skip`)
are counted; psdsim's default `kv_patch = "has_deferred"` makes the same skips
(`BatchManagerSubBatching._appending`), which the per-request blocks check.

Opt-in twice over: it needs vLLM 0.9.2 (benchmarks/install_vllm_v0_host.sh) and a checkout of
MineDraft named by PSDSIM_MINEDRAFT (its code is imported from there, never copied here); it skips
with its reason otherwise (docs/engines.md, "MineDraft's patched scheduler"):

    PSDSIM_MINEDRAFT=/path/to/MineDraft /work/venv-vllm092/bin/python -m pytest \
        tests/engine/test_vllm_v0_minedraft.py
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback
from dataclasses import fields
from pathlib import Path

import pytest

from tests.helpers.minedraft_conformance import MATCHING, SWAP, K, PsdSubBatchSide, SubBatchView, kept
from tests.helpers.scheduler_conformance import (
    TOKEN,
    VLLM_VERSION,
    VllmSide,
    exercised,
    installed_vllm,
    run_side,
    sorted_ids,
)

SCHEDULER = "minedraft/plugin/core/scheduler.py"


def _checkout() -> Path | None:
    """MineDraft's checkout named by PSDSIM_MINEDRAFT, if it holds the patched scheduler."""
    root = os.environ.get("PSDSIM_MINEDRAFT")
    return Path(root) if root and (Path(root) / SCHEDULER).is_file() else None


def _skip_reason() -> str:
    if installed_vllm() != VLLM_VERSION:
        return (f"opt-in: needs vLLM {VLLM_VERSION} (found {installed_vllm()}); install it with "
                "benchmarks/install_vllm_v0_host.sh (docs/engines.md)")
    return (f"opt-in: set PSDSIM_MINEDRAFT to a checkout of electron-shaders/MineDraft holding "
            f"{SCHEDULER} (found {os.environ.get('PSDSIM_MINEDRAFT')!r})")


pytestmark = pytest.mark.skipif(installed_vllm() != VLLM_VERSION or _checkout() is None,
                                reason=_skip_reason())


COMPARED = tuple(f.name for f in fields(SubBatchView) if f.name != "skipped")


# -- MineDraft's patches, applied for one test and taken back -----------------------------


@contextlib.contextmanager
def minedraft_patches(root: Path, workdir: Path):
    """Apply MineDraft's scheduler patches to vLLM, then restore vLLM's own attributes, so that
    the rest of the session (the conformance suite) sees the plain scheduler. `SchedulerPatch`
    and `SequenceGroupPatch` (`batch_flag`) are applied as the plugin applies them; the output
    patches (`SchedulerOutputsPatch`, `SchedulerRunningOutputsPatch`, `SchedulerModulePatch`)
    only add the preempted requests' ids the engine reads, and override `__new__`, which one
    process cannot take back: `MineDraftSide` gives its scheduler their running-outputs builder
    instead. The plugin's tracer makes a `benchmarks/trace` folder in the working directory at
    import: `workdir` takes it."""
    here = os.getcwd()
    sys.path.insert(0, str(root))
    os.chdir(workdir)
    try:
        from minedraft.plugin.core import scheduler as mine
        from minedraft.plugin.sequence import SequenceGroupPatch
    finally:
        os.chdir(here)
    patches = [SequenceGroupPatch, mine.SchedulerPatch]
    saved = [(p._mine_patch_target, name, p._mine_patch_target.__dict__.get(name, _MISSING))
             for p in patches for name in p.__dict__ if name not in _NOT_PATCHED]
    try:
        for p in patches:
            p.apply_patch()
        yield mine
    finally:
        for target, name, value in saved:
            if value is _MISSING:
                delattr(target, name)
            else:
                setattr(target, name, value)
        for p in patches:
            del p._mine_patch_target._mine_patches
        sys.path.remove(str(root))


_MISSING = object()
_NOT_PATCHED = ("_mine_patch_target", "__dict__", "__weakref__", "__module__", "__doc__", "__parameters__")


# -- MineDraft's side ----------------------------------------------------------------------


class MineDraftSide(VllmSide):
    """vLLM 0.9.2's scheduler under MineDraft's patch, with its worker's choice of the verified
    sub-batch and the spec-decode output processor (`MultiStepOutputProcessor`)."""

    def __init__(self, case, mine) -> None:
        from vllm.engine.output_processor.multi_step import MultiStepOutputProcessor
        from vllm.engine.output_processor.stop_checker import StopChecker
        from vllm.utils import Counter, PyObjectCache

        from tests.helpers.scheduler_conformance import MAX_MODEL_LEN
        super().__init__(case)
        self.mine = mine
        self.scheduler.set_use_pearl(False)
        self.scheduler._scheduler_running_outputs_cache = [   # MineDraft's, with preempted ids
            PyObjectCache(mine.SchedulerRunningOutputsPatch.create_empty)]
        self.scheduler.set_max_num_seqs_for_psd(case.max_seqs)   # the engine passes 2m
        self.engine.draft_size = K + 1
        self.output = MultiStepOutputProcessor(None, [self.scheduler], Counter(), lambda seq: None,
                                               StopChecker(MAX_MODEL_LEN, lambda seq: None))
        self.send = True            # the worker's _send_batch_flag
        self.stopped: traceback.FrameSummary | None = None   # where MineDraft's code raised
        self.appended: set[str] = set()
        own = self.scheduler._append_slots

        def append_slots(seq_group, blocks_to_copy, enable_chunking=False):
            self.appended.add(seq_group.request_id)
            return own(seq_group, blocks_to_copy, enable_chunking)
        self.scheduler._append_slots = append_slots
        self.now = 0.0

    def step(self, now: float) -> SubBatchView | None:
        self.mine.TRACER.add(self.mine.Step)   # the step trace preemptions are written to
        self.appended.clear()
        self.now = now
        try:
            view = super().step(now)
        except AssertionError as stop:   # MineDraft's own assertion: its engine stops here
            self.stopped = traceback.extract_tb(stop.__traceback__)[-1]
            return None
        if view is None:
            return None
        return SubBatchView(**vars(view), **self._extra)

    @property
    def done(self) -> bool:
        return self.stopped is not None or super().done

    def _worker_turn(self, metas, scheduled) -> tuple[list, list]:
        """(verified, drafted) groups as `ParallelSpecDecodeWorker` splits a decode step
        (`_split_batched_requests`), its `_send_batch_flag` flipped or reset as it leaves it."""
        decodes = [(m, g) for m, g in zip(metas, scheduled, strict=True) if not m.is_prompt]
        if not decodes or len(decodes) < len(metas):   # a prompt step (no chunked prefill here)
            return [], []
        sending = [m.batch_flag == self.send for m, _ in decodes]
        if all(sending) or not any(sending):   # one sub-batch empty: verify all
            self.send = True
            return [g for _, g in decodes], []
        self.send = not self.send
        return ([g for (_, g), s in zip(decodes, sending, strict=True) if s],
                [g for (_, g), s in zip(decodes, sending, strict=True) if not s])

    def _process_outputs(self, metas, scheduled, end: float) -> list[str]:
        """The worker's turn, then the engine's output processing of the tokens it returns."""
        from vllm.sequence import SequenceStatus
        verified, drafted = self._worker_turn(metas, scheduled)
        name, block_manager = self._name, self.scheduler.block_manager
        held = [(name(g.request_id), sum(len(block_manager.get_block_table(s))
                                         for s in g.get_seqs(status=SequenceStatus.RUNNING)))
                for g in self.scheduler.running]
        self._extra = dict(
            flagged=sorted_ids(name(g.request_id)
                            for g, m in zip(scheduled, metas, strict=True) if m.batch_flag),
            verified=sorted_ids(name(g.request_id) for g in verified),
            drafted=sorted_ids(name(g.request_id) for g in drafted),
            held=tuple(sorted(held)),
            skipped=sum(not m.is_prompt and g.request_id not in self.appended
                        for m, g in zip(metas, scheduled, strict=True)))
        # MineDraft's `LLMEngine._process_model_outputs` skips the drafted rows (token -1) whole:
        # neither their computed tokens nor their outputs are updated
        scored = [(m, g) for m, g in zip(metas, scheduled, strict=True) if g not in drafted]
        return super()._process_outputs([m for m, _ in scored], [g for _, g in scored], end)

    def _sample(self, meta, group) -> None:
        """A prompt samples one token; a verified request keeps `kept` tokens, padded with -1 to
        k + 1 rows (MineDraft's `_create_output_sampler_list`)."""
        from vllm.sequence import (
            VLLM_INVALID_TOKEN_ID,
            CompletionSequenceGroupOutput,
            Logprob,
            SequenceOutput,
        )
        seq = group.first_seq
        tokens = 1 if meta.is_prompt else kept(self._name(group.request_id), self.now)
        rows = [TOKEN] * tokens + [VLLM_INVALID_TOKEN_ID] * (K + 1 - tokens)
        outputs = [CompletionSequenceGroupOutput([SequenceOutput(seq.seq_id, t, {t: Logprob(0.0)})], None)
                   for t in rows]
        for i, out in enumerate(outputs):
            out.step_index = i
        self.output.process_outputs(group, outputs, False)


# -- psdsim's side -------------------------------------------------------------------------


# -- the comparison --------------------------------------------------------------------------


def mismatches(ours: list[SubBatchView], theirs: list[SubBatchView]) -> list[tuple[int, str, object, object]]:
    """(step, field, MineDraft's, psdsim's) for each compared field that differs; steps beyond the
    shorter run count one each."""
    shorter = min(len(ours), len(theirs))
    pairs = enumerate(zip(ours[:shorter], theirs[:shorter], strict=True))
    out = [(i, f, getattr(b, f), getattr(a, f)) for i, (a, b) in pairs
           for f in COMPARED if getattr(a, f) != getattr(b, f)]
    return out + [(i, "steps", len(theirs), len(ours)) for i in range(shorter, max(len(ours), len(theirs)))]


@pytest.fixture
def mine(tmp_path):
    with minedraft_patches(_checkout(), tmp_path) as module:
        yield module


def _summary(ours: list[SubBatchView], theirs: list[SubBatchView]) -> str:
    bad = mismatches(ours, theirs)
    first = f"; first: step {bad[0][0]} {bad[0][1]}: MineDraft {bad[0][2]} psdsim {bad[0][3]}" if bad else ""
    return f"{len(theirs)} steps compared, {len({m[0] for m in bad})} differ{first}"


@pytest.mark.parametrize("case", MATCHING, ids=[c.name for c in MATCHING])
def test_every_psd_step_matches_minedraft(case, mine):
    """Flags, the verified and the drafted sub-batch, skipped appends' blocks, preemptions,
    finishes and aborts: the same at every step, and the workload does what its name says."""
    theirs = run_side(MineDraftSide(case, mine))
    ours = run_side(PsdSubBatchSide(case))
    assert mismatches(ours, theirs) == [], _summary(ours, theirs)
    assert sum(bool(v.drafted) for v in theirs) > len(theirs) // 2, "few steps drafted beside the pass"
    assert sum(v.skipped for v in theirs) > 0
    wanted = {"prefill", "recompute"} if case.gpu_blocks < 200 else {"prefill"}
    assert wanted | ({"abort"} if case.cancel_after else set()) <= exercised(theirs)


def test_a_skipped_append_is_not_always_a_no_op(mine):
    """MineDraft's skip holds a request below context + k after a step that verified its
    sub-batch too (the fallback with one sub-batch empty): psdsim's `kv_patch = "default"`, which
    appends for every request, holds more blocks there, so the comparison tells them apart."""
    case = MATCHING[1]   # Poisson, KV loose: sub-batches empty and refill
    theirs = run_side(MineDraftSide(case, mine))
    side = PsdSubBatchSide(case)
    side.sub_batching.checks_skipped = side.hooks.checks_skipped = False   # kv_patch = "default"
    differ = {f for _, f, _, _ in mismatches(run_side(side), theirs)}
    assert differ and differ <= {"blocks", "held"}, differ


def test_with_swap_minedraft_stops_where_its_assertion_fails_and_psdsim_goes_on(mine):
    """A request swapped out after it decoded stays in `_has_deferred_skip` (only
    `_preempt_by_recompute`, finishing and aborting discard it), so when the running set empties
    with it still swapped out, `Scheduler._schedule`'s `assert len(self._has_deferred_skip) == 0`
    stops MineDraft's engine. Up to there every step matches; psdsim runs every request to its
    end (docs/minedraft-fidelity.md)."""
    side = MineDraftSide(SWAP, mine)
    theirs = run_side(side)
    psdsim = PsdSubBatchSide(SWAP)
    ours = run_side(psdsim)
    assert side.stopped is not None and side.stopped.name == "_schedule", side.stopped
    assert psdsim.skip_set_stop == len(theirs)   # psdsim's run warning names this step
    assert "_has_deferred_skip" in side.stopped.line
    assert "swap" in exercised(theirs)
    assert mismatches(ours[:len(theirs)], theirs) == [], _summary(ours[:len(theirs)], theirs)
    assert len(ours) > len(theirs) and sum(len(v.finished) + len(v.aborted) for v in ours) == SWAP.requests


def test_the_patches_are_taken_back(tmp_path):
    """Outside a MineDraft test vLLM's scheduler is its own again, so that the conformance suite
    in the same session runs the plain scheduler."""
    from vllm import sequence
    from vllm.core import scheduler
    classes = (scheduler.Scheduler, sequence.SequenceGroup)
    before = [dict(vars(c)) for c in classes]
    with minedraft_patches(_checkout(), tmp_path):
        assert hasattr(scheduler.Scheduler, "set_max_num_seqs_for_psd")
    assert [dict(vars(c)) for c in classes] == before
