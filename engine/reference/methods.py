"""The step loops of `ar`, `sd`, `psd` and `pearl` on the driver (docs/design.md §2).

Every engine step: admit (a prefill-only step when prompts were admitted), else a decode step of
the method; then retire the finished requests. The methods differ only in their decode step:

- `ar`: one target pass, one token per request.
- `sd`: draft k tokens for every running request, then one target pass scores them, then
  rejection sampling, one after the other (the target in the driver's process unless
  `separate_verifier`).
- `psd`: MineDraft. Two sub-batches; the target scores sub-batch S (drafted in the previous step)
  while the driver drafts the other one, D; S and D then swap. The worker's flag `send` and the
  Batch Manager (sim/batches.py, the simulator's own class) follow sim/methods/sub_batching.py exactly:
  an init step (no proposals yet) and a fallback step (one sub-batch empty: verify all, draft
  nothing ahead) draft S first and are not parallelised.
- `pearl`: every step scores every request's proposals while the driver drafts k tokens ahead of
  them, as if all will be accepted. The first token drafted ahead stands in for the bonus token:
  it is checked against the target's distribution after the last proposal (rejection sampling
  again, so the output stays exactly the target's), and when it and every proposal pass, the
  other k - 1 drafted ahead are the next step's proposals; otherwise the request's next step has
  no proposals (PEARL's pre-verify step: its first token drafted ahead is checked the same way).

Rollback is bookkeeping only: a model's cache length for a request is cut to the longest prefix
of what it processed that the accepted sequence still agrees with; later passes overwrite.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from psdsim.engine.reference import sampling
from psdsim.engine.reference.config import EngineConfig
from psdsim.engine.reference.schedule import Request, Scheduler
from psdsim.engine.reference.trace import StepRecord
from psdsim.engine.reference.workers import (
    PREFILL,
    SCORE,
    Drafter,
    LocalTarget,
    RemoteTarget,
    TargetCall,
    TargetOutput,
    clock,
    span,
)
from psdsim.sim.batches import BatchManager

Target = LocalTarget | RemoteTarget


class Engine:
    """Drives one method over the workload; collects step records."""

    def __init__(self, cfg: EngineConfig, scheduler: Scheduler, target: Target, drafter: Drafter | None,
                 generator: torch.Generator, device: torch.device) -> None:
        self.cfg, self.scheduler, self.target, self.drafter = cfg, scheduler, target, drafter
        self.generator = generator
        self.device = device
        self.steps: list[StepRecord] = []
        self.decode: Callable[[StepRecord], None] = {
            "ar": self._ar, "sd": self._sd, "psd": self._psd, "pearl": self._pearl}[cfg.method]
        # PSD: the Batch Manager (scheduler side) and the worker's state, as sim/methods/sub_batching.py.
        self.batches = BatchManager()
        self.members: dict[bool, list[Request]] = {False: [], True: []}
        self.send = True
        self.have_previous = False

    def now(self) -> float:
        return clock(self.device)

    def run(self) -> None:
        while not self.scheduler.done:
            self.step()

    def step(self) -> None:
        rec = StepRecord(len(self.steps), start_s=time.perf_counter())
        was_running = len(self.scheduler.running)
        prompts = self.scheduler.admit()
        if self.cfg.method == "psd" and prompts:
            if not was_running:
                self.batches.reset()
            for r in prompts:
                r.flag = self.batches.assign()
        if self.cfg.method == "psd":
            rec.batches = (len(self.members[False]), len(self.members[True]))
        rec.batch_start_s = self.now()
        if prompts:
            self._prefill(rec, prompts)
        else:
            self.decode(rec)
        rec.batch_end_s = self.now()
        rec.overhead_s = rec.batch_end_s - rec.batch_start_s - rec.draft_s - rec.target_s
        for r in self.scheduler.retire(rec.batch_end_s):
            if self.cfg.method == "psd":
                self.batches.recycle(r.flag)
                self.members[r.flag].remove(r)
        rec.end_s = time.perf_counter()
        self.steps.append(rec)

    # -- prompt steps ------------------------------------------------------------------------

    def _prefill(self, rec: StepRecord, prompts: list[Request]) -> None:
        """Both models take the prompts; the target's distribution after each gives its first
        token. With the target in its own process the two prefills run at the same time."""
        call = TargetCall(PREFILL, [r.slot for r in prompts], [0] * len(prompts), [r.prompt for r in prompts])
        rec.prompts = rec.verify_batch = len(prompts)
        rec.tokens = call.tokens
        rec.requests = [r.tid for r in prompts]
        start = self.now()
        remote = isinstance(self.target, RemoteTarget)
        self.target.submit(call)
        if remote:  # overlaps the target's prefill in the other process
            self._draft_prefill(rec, prompts)
        out = self.target.collect()
        if not remote:
            self._draft_prefill(rec, prompts)
        rec.target_s = self.now() - start
        self._channel(rec, out)
        tokens = sampling.sample(out.probs, self.generator)
        now = self.now()
        for r, t in zip(prompts, tokens, strict=True):
            r.target_len = len(r.prompt)
            r.emit([t])
            r.first_token_s = now
        rec.generated = rec.kept = len(prompts)
        if self.cfg.method == "psd":
            for r in prompts:
                self.members[r.flag].append(r)

    def _draft_prefill(self, rec: StepRecord, prompts: list[Request]) -> None:
        if self.drafter is not None:
            start = self.now()
            self.drafter.prefill(prompts)
            rec.draft_prefill_s = self.now() - start

    # -- decode steps ------------------------------------------------------------------------

    def _ar(self, rec: StepRecord) -> None:
        running = self.scheduler.running
        rec.requests = [r.tid for r in running]
        out = self._score(rec, self._score_call(rec, running))
        for r, t in zip(running, sampling.sample(out.probs, self.generator), strict=True):
            r.target_len += 1
            rec.generated += 1
            rec.kept += r.emit([t])

    def _sd(self, rec: StepRecord) -> None:
        running = self.scheduler.running
        rec.requests = [r.tid for r in running]
        self._draft_sync(rec, running)
        out = self._score(rec, self._score_call(rec, running))
        self._verify(rec, running, out.probs)

    def _psd(self, rec: StepRecord) -> None:
        v = self.send
        if not self.members[v]:
            v = not v  # one sub-batch empty: verify everything, draft nothing ahead
        verified, ahead = list(self.members[v]), list(self.members[not v])
        rec.requests = [r.tid for r in verified + ahead]
        self.batches.decode_scheduled()
        rec.parallelised = self.have_previous
        if not rec.parallelised:  # init or fallback: S has no drafts yet
            self._draft_sync(rec, verified)
        call = self._score_call(rec, verified)
        start = self.now()
        self.target.submit(call)
        if ahead:
            self._draft_ahead(rec, ahead)
        waiting = self.now()
        out = self.target.collect()
        rec.target_s = self.now() - start
        rec.wait_s = self.now() - waiting
        self._channel(rec, out)
        self._verify(rec, verified, out.probs)
        self.have_previous, self.send = (True, not self.send) if ahead else (False, True)

    def _pearl(self, rec: StepRecord) -> None:
        running = self.scheduler.running
        rec.requests = [r.tid for r in running]
        rec.parallelised = True
        call = self._score_call(rec, running)
        start = self.now()
        self.target.submit(call)
        drafted = self._draft_ahead(rec, running)
        waiting = self.now()
        out = self.target.collect()
        rec.target_s = self.now() - start
        rec.wait_s = self.now() - waiting
        self._channel(rec, out)
        self._verify(rec, running, out.probs, ahead=drafted)

    # -- shared pieces -----------------------------------------------------------------------

    def _score(self, rec: StepRecord, call: TargetCall) -> TargetOutput:
        """A target pass with nothing overlapping it (AR, SD): submit, wait, time it."""
        start = self.now()
        self.target.submit(call)
        out = self.target.collect()
        rec.target_s = self.now() - start
        self._channel(rec, out)
        return out

    def _score_call(self, rec: StepRecord, requests: list[Request]) -> TargetCall:
        """Each request's pending token (the last emitted, not yet in the target's cache) and
        its proposals."""
        call = TargetCall(SCORE, [r.slot for r in requests], [r.target_len for r in requests],
                          [r.sequence_from(r.target_len) for r in requests])
        rec.speculative = self.drafter is not None
        rec.k = self.cfg.k if self.drafter is not None else 0
        rec.verify_batch = len(requests)
        rec.verify_ctx = call.context
        rec.verify_len = sum(len(r.proposals) for r in requests)
        rec.tokens = call.tokens
        return call

    def _draft_sync(self, rec: StepRecord, requests: list[Request]) -> None:
        assert self.drafter is not None
        rec.draft_sync_batch = len(requests)
        rec.draft_sync_ctx = sum(r.draft_len for r in requests)
        start = self.now()
        for r, (tokens, q) in zip(requests, self.drafter.draft(requests, self.cfg.k), strict=True):
            r.proposals, r.q = tokens, q
        rec.draft_sync_s = rec.draft_s = self.now() - start

    def _draft_ahead(self, rec: StepRecord, requests: list[Request]
                     ) -> list[tuple[list[int], torch.Tensor]]:
        """Draft k tokens continuing each request's tokens + proposals. PSD keeps them as the
        proposals (its sub-batch D has none); PEARL returns them for after the verification."""
        assert self.drafter is not None
        rec.draft_ahead_batch = len(requests)
        rec.draft_ahead_ctx = sum(r.draft_len for r in requests)
        start = self.now()
        drafted = self.drafter.draft(requests, self.cfg.k)
        if self.cfg.method == "psd":
            for r, (tokens, q) in zip(requests, drafted, strict=True):
                r.proposals, r.q = tokens, q
        rec.draft_ahead_s = self.now() - start
        return drafted

    def _verify(self, rec: StepRecord, requests: list[Request], probs: torch.Tensor,
                ahead: list[tuple[list[int], torch.Tensor]] | None = None) -> None:
        """Rejection sampling over the scored requests, then the caches' bookkeeping. With
        `ahead` (PEARL) each chain is the proposals + the first token drafted ahead, and there is
        no bonus position."""
        start = self.now()
        vocab = probs.shape[1]
        rows = probs.split([len(r.tokens) - r.target_len + len(r.proposals) for r in requests])
        chains, dists = [], []
        for i, r in enumerate(requests):
            q = r.q if r.q is not None else probs.new_zeros(0, vocab)
            if ahead is None:
                chains.append(r.proposals)
                dists.append(q)
            else:
                chains.append([*r.proposals, ahead[i][0][0]])
                dists.append(torch.cat([q, ahead[i][1][:1]]))
        with span(f"psdsim:reject positions={probs.shape[0]}", self.cfg.profile):
            verdict = sampling.verify(list(rows), dists, chains, self.generator)
        for i, r in enumerate(requests):
            accepted = min(verdict.accepted[i], len(r.proposals))
            base = len(r.tokens)
            drafted = r.proposals + (ahead[i][0] if ahead is not None else [])  # the draft cache from base on
            r.target_len += 1 + accepted
            rec.accepted += accepted
            rec.generated += accepted + 1
            full_chain = ahead is not None and verdict.accepted[i] == len(r.proposals) + 1
            r.drop_proposals()
            if full_chain:
                r.proposals, r.q = ahead[i][0][1:], ahead[i][1][1:]  # the rest drafted ahead
            rec.kept += r.emit(verdict.emitted[i])
            self._keep_draft_prefix(r, base, drafted)
        rec.reject_s = self.now() - start

    @staticmethod
    def _keep_draft_prefix(r: Request, base: int, drafted: list[int]) -> None:
        """The draft cache held `drafted` from position `base` on: keep it up to where that still
        agrees with the request's tokens + proposals."""
        now = r.sequence_from(base)
        agree = 0
        while agree < min(len(now), len(drafted)) and now[agree] == drafted[agree]:
            agree += 1
        r.draft_len = min(r.draft_len, base + agree)

    @staticmethod
    def _channel(rec: StepRecord, out: TargetOutput) -> None:
        rec.target_compute_s = out.compute_s
        if out.send_bytes:
            rec.send_s, rec.send_bytes = out.send_s, out.send_bytes
            rec.return_s, rec.return_bytes = out.return_s, out.return_bytes
