"""The scheduler conformance harness: the same requests fed to vLLM 0.9.2's real V0 Scheduler
(where it is installed) and to psdsim's, step by step, with the workloads both suites run."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import itertools
import math
from dataclasses import dataclass, replace

import numpy as np

from psdsim.sim.kv import KVPools
from psdsim.sim.requests import ABORTED, DECODING, FINISHED, SWAPPED, WAITING, RequestTable
from psdsim.sim.scheduler import EngineHooks, Scheduler
from psdsim.sim.workload import Workload

VLLM_VERSION = "0.9.2"


def installed_vllm() -> str | None:
    """vLLM's installed version, read without importing it (None: not installed)."""
    if importlib.util.find_spec("vllm") is None:
        return None
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


BLOCK = 16


STEP_S = 1.0          # every engine step lasts one time unit on both sides


TOKEN = 7             # the synthetic sampled token


MAX_MODEL_LEN = 2048


@dataclass(frozen=True)
class Case:
    """One workload and engine configuration, as both schedulers are given it. Per prompt:
    `prompts` and `outputs` lengths, `arrivals` (seconds), `cancel_after` (seconds after the
    request's first token that its client cancels; NaN: never); each prompt fans out into `n`
    requests (SamplingParams.n)."""

    name: str
    prompts: tuple[int, ...]
    outputs: tuple[int, ...]
    arrivals: tuple[float, ...]
    gpu_blocks: int
    max_seqs: int = 8
    budget: int = 2048
    n: int = 1
    swap_blocks: int = 0    # CPU blocks; > 0 selects preemption_mode="swap"
    cancel_after: tuple[float, ...] = ()
    chunked: bool = False   # enable_chunked_prefill (MineDraft runs without it)
    lookahead: int = 0      # KV slots beyond the context each decode holds (k with drafts)

    @property
    def requests(self) -> int:
        return len(self.prompts) * self.n

    def per_request(self, values: tuple) -> np.ndarray:
        """A per-prompt column fanned out to its n requests."""
        return np.repeat(np.asarray(values), self.n)


@dataclass
class StepView:
    """What one engine step did, in terms both schedulers can state. Requests are named by their
    index in arrival order (prompt * n + sample)."""

    time: float
    scheduled: tuple[int, ...]         # in the scheduler's order
    prefill: bool                      # a prompt run (vLLM: num_prefill_groups > 0)
    recomputed: tuple[int, ...] = ()   # preempted by recompute (sorted)
    swapped_out: tuple[int, ...] = ()
    swapped_in: tuple[int, ...] = ()
    blocks: int = 0                    # GPU blocks in use once the step is scheduled
    finished: tuple[int, ...] = ()
    aborted: tuple[int, ...] = ()


def sorted_ids(ids) -> tuple[int, ...]:
    return tuple(sorted(int(i) for i in ids))


class PsdsimSide:
    """psdsim's vllm-v0 scheduler stepped as sim/methods/ar.py steps it: decodes and completed
    prompts emit one token each, first tokens start their clients' cancel clocks, then the step
    is closed."""

    def __init__(self, case: Case) -> None:
        n = case.requests
        cancel = case.per_request(case.cancel_after) if case.cancel_after else np.full(n, np.nan)
        workload = Workload(case.per_request(case.arrivals).astype(float),
                            case.per_request(case.prompts).astype(np.int64),
                            case.per_request(case.outputs).astype(np.int64),
                            np.full(n, np.nan), cancel.astype(float),
                            prompt=np.repeat(np.arange(len(case.prompts)), case.n))
        self.table = RequestTable(workload)
        kv = KVPools({"verifier": case.gpu_blocks}, BLOCK, n)
        self.scheduler = Scheduler(self.table, kv, version="vllm-v0", chunked=case.chunked,
                                   swap=case.swap_blocks > 0, swap_blocks=case.swap_blocks,
                                   max_running=case.max_seqs, token_budget=case.budget)
        self.hooks = EngineHooks()

    def _decoded(self, plan) -> None:
        """The step's decodes emit their tokens: one each (AR)."""
        self.table.emit(plan.decode, np.ones(len(plan.decode), dtype=np.int64))

    def _requests(self, slots) -> list[int]:
        return [int(self.table.request[s]) for s in slots]

    def step(self, now: float) -> StepView | None:
        s, t = self.scheduler, self.table
        s.arrive_until(now)
        before = list(s.running)
        swapped_before = set(s.swapped)
        plan = s.plan(self.hooks, now)
        if plan.empty:
            return None
        end = now + STEP_S
        view = StepView(now, tuple(self._requests(plan.prefill) + self._requests(plan.decode)),
                        bool(len(plan.prefill)), blocks=plan.kv_blocks)
        view.recomputed = sorted_ids(self._requests(r for r in before if t.state[r] == WAITING))
        view.swapped_out = sorted_ids(self._requests(r for r in before if t.state[r] == SWAPPED))
        view.swapped_in = sorted_ids(self._requests(r for r in swapped_before if t.state[r] == DECODING))
        self._decoded(plan)
        done = plan.prefill[plan.completes]
        t.emit(done, np.ones(len(done), dtype=np.int64))
        t.first_token(done, end)
        finished, aborted = s.close_step(plan, end, self.hooks)
        view.finished = sorted_ids(self._requests(r for r in finished if t.state[r] == FINISHED))
        view.aborted = sorted_ids(self._requests(r for r in aborted if t.state[r] == ABORTED))
        return view

    @property
    def done(self) -> bool:
        return self.scheduler.done

    def next_arrival(self) -> float:
        return self.scheduler.next_arrival_s()


class _Engine:
    """The part of LLMEngine that ParallelSampleSequenceGroup.add_request calls back into: it
    makes each fanned-out request's SequenceGroup and hands it to the scheduler."""

    def __init__(self, scheduler, draft_size: int = 1) -> None:
        self.scheduler = scheduler
        self.draft_size = draft_size   # SequenceGroup's: the speculative tokens plus one
        self.seq_id_to_seq_group: dict = {}
        self.seq_counter = itertools.count()

    def _add_processed_request(self, request_id, processed_inputs, params, arrival_time, **_):
        from vllm.sequence import Sequence, SequenceGroup
        seq = Sequence(next(self.seq_counter), processed_inputs, block_size=BLOCK)
        group = SequenceGroup(request_id, [seq], arrival_time=arrival_time, sampling_params=params,
                              draft_size=self.draft_size)
        self.scheduler.add_seq_group(group)
        return group


class VllmSide:
    """vLLM 0.9.2's V0 Scheduler with the engine's host-side output processing around it."""

    def __init__(self, case: Case) -> None:
        from vllm.config import CacheConfig, SchedulerConfig
        from vllm.core.scheduler import Scheduler as VllmScheduler
        from vllm.engine.output_processor.single_step import SingleStepOutputProcessor
        from vllm.engine.output_processor.stop_checker import StopChecker
        from vllm.utils import Counter

        config = SchedulerConfig(runner_type="generate", max_num_batched_tokens=case.budget,
                                 max_num_seqs=case.max_seqs, max_model_len=MAX_MODEL_LEN,
                                 enable_chunked_prefill=case.chunked,
                                 num_lookahead_slots=case.lookahead,
                                 preemption_mode="swap" if case.swap_blocks else None)
        cache = CacheConfig(block_size=BLOCK, gpu_memory_utilization=0.9, swap_space=0,
                            cache_dtype="auto")
        cache.num_gpu_blocks, cache.num_cpu_blocks = case.gpu_blocks, case.swap_blocks
        self.scheduler = VllmScheduler(config, cache, None)
        self.engine = _Engine(self.scheduler)
        self.output = SingleStepOutputProcessor(config, None, [self.scheduler], Counter(),
                                                StopChecker(MAX_MODEL_LEN, lambda seq: None))
        self.case = case
        self.added = 0                      # prompts handed to the engine
        self.first_token: dict[str, float] = {}
        self.ended: set[str] = set()

    def _name(self, request_id: str) -> int:
        """The request's index in arrival order (psdsim's id) from vLLM's request id."""
        prompt, _, sample = request_id.partition("_parallel_sample_")
        return int(prompt) * self.case.n + (int(sample) if sample else 0)

    def _arrive(self, now: float) -> None:
        from vllm.inputs import token_inputs
        from vllm.sampling_params import SamplingParams
        case = self.case
        while self.added < len(case.prompts) and case.arrivals[self.added] <= now:
            i = self.added
            params = SamplingParams(n=case.n, max_tokens=case.outputs[i], ignore_eos=True)
            inputs = token_inputs(list(range(100, 100 + case.prompts[i])))
            if case.n > 1:
                from vllm.sequence import ParallelSampleSequenceGroup
                ParallelSampleSequenceGroup.add_request(
                    str(i), self.engine, params, processed_inputs=inputs,
                    arrival_time=case.arrivals[i], lora_request=None, trace_headers=None,
                    prompt_adapter_request=None, priority=0)
            else:
                self.engine._add_processed_request(str(i), inputs, params, case.arrivals[i])
            self.added += 1

    def _groups(self, queue) -> dict[str, object]:
        return {g.request_id: g for g in queue}

    def step(self, now: float) -> StepView | None:
        sched = self.scheduler
        self._arrive(now)
        running_before = self._groups(sched.running)
        swapped_before = self._groups(sched.swapped)
        metas, out, _ = sched.schedule()
        if not out.scheduled_seq_groups:
            return None
        end = now + STEP_S
        scheduled = [g.seq_group for g in out.scheduled_seq_groups]
        waiting, swapped = self._groups(sched.waiting), self._groups(sched.swapped)
        view = StepView(now, tuple(self._name(g.request_id) for g in scheduled),
                        out.num_prefill_groups > 0,
                        recomputed=sorted_ids(self._name(r) for r in running_before if r in waiting),
                        swapped_out=sorted_ids(self._name(r) for r in running_before if r in swapped),
                        swapped_in=sorted_ids(self._name(r) for r in swapped_before if r not in swapped),
                        blocks=sched.block_manager.num_total_gpu_blocks
                        - sched.block_manager.get_num_free_gpu_blocks())
        finished = self._process_outputs(metas, scheduled, end)
        view.finished = sorted_ids(self._name(r) for r in finished)
        view.aborted = sorted_ids(self._name(r) for r in self._cancel(end))
        return view

    def _process_outputs(self, metas, scheduled, end: float) -> list[str]:
        """What LLMEngine._process_model_outputs does with a synthetic token per sampled group."""
        finished = []
        for meta, group in zip(metas, scheduled, strict=True):
            group.update_num_computed_tokens(meta.token_chunk_size or 0)
            if meta.do_sample:
                self._sample(meta, group)
                self.first_token.setdefault(group.request_id, end)
            if group.is_finished():
                finished.append(group.request_id)
                self.ended.add(group.request_id)
        if finished:
            self.scheduler.free_finished_seq_groups()
        return finished

    def _sample(self, meta, group) -> None:
        """The model's output for a sampled group: one synthetic token (AR)."""
        from vllm.sequence import CompletionSequenceGroupOutput, Logprob, SequenceOutput
        sample = SequenceOutput(group.first_seq.seq_id, TOKEN, {TOKEN: Logprob(0.0)})
        self.output.process_outputs(group, [CompletionSequenceGroupOutput([sample], None)], False)

    def _cancel(self, end: float) -> list[str]:
        """Clients whose cancel time has come (psdsim's rule: `cancel_after` seconds after the
        first token, at the end of a step) abort their unfinished requests."""
        if not self.case.cancel_after:
            return []
        due = [r for r, first in self.first_token.items() if r not in self.ended
               and first + self.case.cancel_after[self._name(r) // self.case.n] <= end]
        if due:
            self.scheduler.abort_seq_group(due)
            self.ended.update(due)
        return sorted(due, key=self._name)

    @property
    def done(self) -> bool:
        return self.added == len(self.case.prompts) and not self.scheduler.has_unfinished_seqs()

    def next_arrival(self) -> float:
        return self.case.arrivals[self.added] if self.added < len(self.case.prompts) else math.inf


def run_side(side, limit: int = 20_000) -> list[StepView]:
    """Step one side until every request has ended; an idle engine waits for the next arrival."""
    views: list[StepView] = []
    now = 0.0
    while not side.done and len(views) < limit:
        view = side.step(now)
        if view is None:
            if side.done:   # the side stopped itself (MineDraft's code raising)
                break
            nxt = side.next_arrival()
            assert not math.isinf(nxt), f"{type(side).__name__} stalled at {now}"
            now = nxt
            continue
        views.append(view)
        now += STEP_S
    return views


def drawn(name: str, prompts: int, seed: int, gpu_blocks: int, rate: float | None = None,
           **kw) -> Case:
    """Chat-like prompt lengths (log-normal around 200 tokens, cut to 16-1200), output lengths
    8-96, all at time 0 (offline) or Poisson at `rate` per step."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(np.round(rng.lognormal(np.log(200), 0.8, prompts)), 16, 1200).astype(int)
    outputs = rng.integers(8, 97, prompts)
    arrivals = (np.zeros(prompts) if rate is None
                else np.cumsum(rng.exponential(1 / rate, prompts)))
    return Case(name, tuple(lengths.tolist()), tuple(outputs.tolist()),
                tuple(float(a) for a in arrivals), gpu_blocks, **kw)


OFFLINE_LOOSE = drawn("offline, KV loose", 24, 1, gpu_blocks=2000)


OFFLINE_TIGHT = drawn("offline, KV tight (recompute)", 24, 2, gpu_blocks=90)


POISSON_LOOSE = drawn("Poisson, KV loose", 40, 3, gpu_blocks=2000, rate=0.3)


POISSON_TIGHT = drawn("Poisson, KV tight (recompute)", 40, 4, gpu_blocks=80, rate=0.5)


SWAP_TIGHT = drawn("offline, KV tight (swap)", 24, 5, gpu_blocks=90, swap_blocks=2000)


PARALLEL = drawn("Poisson, n = 2, KV tight", 20, 6, gpu_blocks=120, rate=0.3, n=2)


ABORTS = replace(drawn("Poisson, aborts, KV tight", 30, 7, gpu_blocks=90, rate=0.5),
                 cancel_after=tuple(np.where(np.arange(30) % 3 == 0, 4.5, np.nan).tolist()))


LOOSE = [OFFLINE_LOOSE, POISSON_LOOSE]


TIGHT = [OFFLINE_TIGHT, POISSON_TIGHT, SWAP_TIGHT, PARALLEL, ABORTS]


MATCHING = [*LOOSE, *TIGHT]


def exercised(views: list[StepView]) -> set[str]:
    """What a run did at least once, so that a workload is seen to test what its name says."""
    seen = set()
    for v in views:
        seen |= {name for name, present in (("prefill", v.prefill), ("recompute", v.recomputed),
                                            ("swap", v.swapped_out), ("abort", v.aborted)) if present}
    return seen
