"""The two sides of the engine: the drafter (on the driver) and the target (local or its own process).

MineDraft's layout (docs/reference/paper.md §4.2): the driver runs the scheduler, the draft model and
rejection sampling; the verifier runs the target model and returns, per scored position, the
full-vocabulary probabilities and log-probabilities. Here the verifier is either in the driver's
process (`LocalTarget`: AR and SD, the target sharing the drafter's core as SD shares the
verifier GPUs) or a second OS process (`RemoteTarget`) pinned to its own core, reached over a
pipe (the step's inputs, pickled) and a shared-memory buffer (the outputs: one copy by the
verifier, read in place by the driver). Log-probabilities are carried although rejection sampling
reads only the probabilities, because MineDraft's return message carries both and the simulator
prices those bytes (sim/messages.py); the channel's cost is measured, not assumed.

Times are `time.perf_counter()` (CLOCK_MONOTONIC on Linux: one clock for both processes), after a
device synchronisation where the work ran on a GPU.
"""

from __future__ import annotations

import gc
import os
import pickle
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

import torch

from psdsim.engine.reference.config import EngineConfig
from psdsim.engine.reference.model import Decoder, KVCache, Packed, build_target
from psdsim.engine.reference.sampling import probabilities, sample
from psdsim.engine.reference.schedule import Request

PREFILL, SCORE = "prefill", "score"
WARMUP_PROMPT = 16   # tokens of the warm-up's prefill, where the run's cache holds that many


def span(name: str, enabled: bool) -> AbstractContextManager[object]:
    """A named profiler range (psdsim's convention, calibration/ranges.py) when profiling."""
    return torch.profiler.record_function(name) if enabled else nullcontext()


def clock(device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def pin(core: int | None) -> None:
    """One thread on one core: each model gets a CPU of its own, as each gets a GPU in MineDraft."""
    if core is not None:
        os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)


@dataclass(frozen=True)
class TargetCall:
    """One target pass: prefill (whole prompts; the distribution after each prompt is returned) or
    score (each request's pending token and proposals; a distribution per input token)."""

    kind: str
    slots: list[int]
    starts: list[int]
    inputs: list[list[int]]

    @property
    def tokens(self) -> int:
        return sum(len(x) for x in self.inputs)

    @property
    def context(self) -> int:
        return sum(self.starts)


@dataclass(frozen=True)
class TargetOutput:
    probs: torch.Tensor      # [rows, vocab] on the driver's device
    compute_s: float         # the target pass, timed where it ran
    send_s: float = 0.0      # inputs: driver's send start -> verifier has decoded them
    send_bytes: int = 0
    return_s: float = 0.0    # outputs: verifier's copy into the buffer + the signal's latency
    return_bytes: int = 0


class TargetWorker:
    """The target model, its KV cache, and its passes."""

    def __init__(self, model: Decoder, slots: int, temperature: float, profile: bool) -> None:
        self.model = model
        self.cache: KVCache = model.new_cache(slots)
        self.temperature = temperature
        self.profile = profile
        self.device = model.embed.device

    def run(self, call: TargetCall) -> tuple[torch.Tensor, torch.Tensor]:
        """(probabilities, log-probabilities) of the pass's output rows."""
        batch = Packed.build(call.slots, call.starts, call.inputs, self.device)
        if call.kind == PREFILL:
            name, rows = f"psdsim:prefill tokens={call.tokens}", batch.last_rows()
        else:
            name, rows = (f"psdsim:verify batch={len(call.slots)} tokens={call.tokens} "
                          f"ctx={call.context}", None)
        with span(name, self.profile):
            logits = self.model(batch, self.cache, rows)
            probs = probabilities(logits, self.temperature)
            logprobs = torch.log_softmax(logits / (self.temperature or 1.0), dim=-1)
        return probs, logprobs

    def warmup(self, passes: int) -> None:
        for i in range(passes):
            start, tokens = warmup_pass(i, self.model, 2)
            self.run(TargetCall(PREFILL if i == 0 else SCORE, [0], [start], [tokens]))


def warmup_pass(i: int, model: Decoder, width: int) -> tuple[int, list[int]]:
    """Start position and tokens of warm-up pass i on cache slot 0: a prefill of up to
    WARMUP_PROMPT tokens, then passes of `width` tokens after it (as the run's passes: a draft
    token, a pending token and a proposal). The positions are kept inside the cache the run
    allocated (model.max_len, at least 6: prompt, output and k are each >= 1, and width <= 2) by
    cycling over those after the prefill, as a rollback rewrites them; the token ids are taken
    modulo the vocabulary. Any valid configuration, however small, then warms up."""
    prompt = min(WARMUP_PROMPT, model.max_len - width)
    vocab = model.cfg.vocab
    if i == 0:
        return 0, [t % vocab for t in range(prompt)]
    start = prompt + (i - 1) % (model.max_len - width - prompt + 1)
    return start, [(1 + j) % vocab for j in range(width)]


class LocalTarget:
    """The target in the driver's process: the pass runs when its output is collected."""

    def __init__(self, worker: TargetWorker) -> None:
        self.worker = worker
        self.pid = os.getpid()
        self._call: TargetCall | None = None

    def submit(self, call: TargetCall) -> None:
        self._call = call

    def collect(self) -> TargetOutput:
        assert self._call is not None
        start = clock(self.worker.device)
        probs, _ = self.worker.run(self._call)
        self._call = None
        return TargetOutput(probs, clock(self.worker.device) - start)

    def close(self) -> None:
        """Nothing to stop."""


class RemoteTarget:
    """The target in its own process, over a pipe and shared-memory output buffers."""

    def __init__(self, cfg: EngineConfig, core: int | None, device: torch.device,
                 kineto_path: Path | None) -> None:
        # forkserver: a clean server process (spawned, torch imported, no threads started) forks
        # each verifier, so a verifier starts in a fraction of a spawn's time and never inherits
        # the caller's OpenMP state, as a plain fork would.
        ctx = torch.multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload([__name__])
        rows = cfg.max_running * (cfg.k + 2)
        self.probs = torch.zeros(rows, cfg.model.vocab).share_memory_()
        self.logprobs = torch.zeros(rows, cfg.model.vocab).share_memory_()
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, name="psdsim-verifier", daemon=True,
                                   args=(child, cfg, core, self.probs, self.logprobs, kineto_path))
        self.process.start()
        child.close()
        self.device = device
        try:
            self.pid: int = pickle.loads(self.conn.recv_bytes())  # sent once the target is warm
        except EOFError:
            self.process.join(timeout=10)
            raise RuntimeError(
                f"the verifier process exited before it was ready (exit code {self.process.exitcode}); "
                "its traceback is above. Scripts that start a run must guard it with "
                "`if __name__ == '__main__':` (the new process imports the main module)"
            ) from None
        self._sent = (0.0, 0)

    def submit(self, call: TargetCall) -> None:
        start = time.perf_counter()
        payload = pickle.dumps(call, protocol=pickle.HIGHEST_PROTOCOL)
        self.conn.send_bytes(payload)
        self._sent = (start, len(payload))

    def collect(self) -> TargetOutput:
        waiting = time.perf_counter()
        try:
            rows, received, computed, written = pickle.loads(self.conn.recv_bytes())
        except EOFError:
            self.process.join(timeout=10)
            raise RuntimeError(f"the verifier process died (exit code {self.process.exitcode}); its "
                               "traceback is above") from None
        got = time.perf_counter()
        sent, sent_bytes = self._sent
        # The output crossed when the verifier's copy was done and the driver saw the signal; any
        # time the signal sat in the pipe while the driver was busy drafting is not transfer.
        back = (written - computed) + (got - max(waiting, written))
        probs = self.probs[:rows].to(self.device)
        return TargetOutput(probs, computed - received, received - sent, sent_bytes, back,
                            2 * probs.numel() * probs.element_size())

    def close(self) -> None:
        if self.process.is_alive():
            self.conn.send_bytes(pickle.dumps(None))
            self.process.join(timeout=60)
        self.conn.close()


def _serve(conn: Connection, cfg: EngineConfig, core: int | None, probs_out: torch.Tensor,
           logprobs_out: torch.Tensor, kineto_path: Path | None) -> None:
    """The verifier process: build the target, warm it up, then answer calls until None."""
    pin(core)
    device = verifier_device(cfg)
    target = build_target(cfg.model, cfg.max_len, device)
    worker = TargetWorker(target, cfg.max_running, cfg.temperature, kineto_path is not None)
    worker.warmup(cfg.warmup_passes)
    gc.collect()
    gc.disable()  # as on the driver: no collection in the middle of a pass
    profiler = kineto_profiler(device) if kineto_path is not None else nullcontext()
    with profiler as prof:
        conn.send_bytes(pickle.dumps(os.getpid()))
        while (call := pickle.loads(conn.recv_bytes())) is not None:
            received = clock(device)
            probs, logprobs = worker.run(call)
            computed = clock(device)
            n = probs.shape[0]
            with span(f"psdsim:comm bytes={2 * probs.numel() * probs.element_size()}", worker.profile):
                probs_out[:n].copy_(probs)
                logprobs_out[:n].copy_(logprobs)
            written = time.perf_counter()
            conn.send_bytes(pickle.dumps((n, received, computed, written)))
    if kineto_path is not None and prof is not None:
        prof.export_chrome_trace(str(kineto_path))
    conn.close()


def kineto_profiler(device: torch.device) -> torch.profiler.profile:
    """torch.profiler over the CPU (and the GPU where the work runs there)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return torch.profiler.profile(activities=activities)


def driver_device(cfg: EngineConfig) -> torch.device:
    return torch.device("cuda:0" if cfg.device == "cuda" else "cpu")


def verifier_device(cfg: EngineConfig) -> torch.device:
    """A GPU of its own where there are two; the same GPU (another process, so other streams)
    where there is one."""
    if cfg.device != "cuda":
        return torch.device("cpu")
    return torch.device("cuda:1" if torch.cuda.device_count() > 1 else "cuda:0")


class Drafter:
    """The draft model on the driver: its KV cache, prompt passes and k-token drafting."""

    def __init__(self, model: Decoder, slots: int, temperature: float, generator: torch.Generator,
                 profile: bool) -> None:
        self.model = model
        self.cache = model.new_cache(slots)
        self.temperature = temperature
        self.generator = generator
        self.profile = profile
        self.device = model.embed.device

    def prefill(self, requests: list[Request]) -> None:
        """Fill the draft's cache with the prompts (the first output token, sampled from the
        target, is fed to the draft when it next drafts)."""
        batch = Packed.build([r.slot for r in requests], [0] * len(requests), [r.prompt for r in requests],
                             self.device)
        with span(f"psdsim:draft_prefill tokens={len(batch.tokens)}", self.profile):
            self.model(batch, self.cache, batch.last_rows())
        for r in requests:
            r.draft_len = len(r.prompt)

    def draft(self, requests: list[Request], k: int) -> list[tuple[list[int], torch.Tensor]]:
        """k tokens per request continuing tokens + proposals: the drafts and their draft
        distributions [k, vocab]. The first pass feeds whatever the draft's cache lacks."""
        ctx = sum(r.draft_len for r in requests)
        inputs = [r.sequence_from(r.draft_len) for r in requests]
        drafted: list[list[int]] = [[] for _ in requests]
        dists: list[list[torch.Tensor]] = [[] for _ in requests]
        slots = [r.slot for r in requests]
        with span(f"psdsim:draft batch={len(requests)} k={k} ctx={ctx}", self.profile):
            for _ in range(k):
                batch = Packed.build(slots, [r.draft_len for r in requests], inputs, self.device)
                q = probabilities(self.model(batch, self.cache, batch.last_rows()), self.temperature)
                tokens = sample(q, self.generator)
                for i, r in enumerate(requests):
                    r.draft_len += len(inputs[i])
                    drafted[i].append(tokens[i])
                    dists[i].append(q[i])
                inputs = [[t] for t in tokens]
        return [(d, torch.stack(rows)) for d, rows in zip(drafted, dists, strict=True)]

    def warmup(self, passes: int) -> None:
        for i in range(passes):
            start, tokens = warmup_pass(i, self.model, 1)
            batch = Packed.build([0], [start], [tokens], self.device)
            self.model(batch, self.cache, batch.last_rows())
