"""The verifier group and the drafter<->verifier link, as SimPy processes and resources.

The driver (the engine loop, running on the drafter GPU in PSD) hands the verifier a job: inputs
to send over the link, target compute, a sampler output to send back. The verifier is one
long-lived process that serves jobs in order. The link has one lane per direction (full duplex:
inputs are broadcast to the verifier group, the sampler output comes back point-to-point from
its first rank); each lane is a FIFO single-server resource: a transfer waits until the lane is
free, then holds it for latency + bytes / bandwidth. That is exactly a capacity-1
`simpy.Resource` served in request order, kept as a "free at" time so that a transfer costs one
event instead of four.

When the run records a timeline (sim/timeline.py) each transfer and each target pass adds a slice
with its exact start and end; otherwise the only cost is a None check.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import simpy

if TYPE_CHECKING:
    from psdsim.sim.timeline import Timeline

TO_VERIFIER = "to_verifier"
TO_DRAFTER = "to_drafter"


class Link:
    def __init__(self, env: simpy.Environment, to_verifier: Callable[[int], float],
                 to_drafter: Callable[[int], float], timeline: Timeline | None = None) -> None:
        self.env = env
        self.timeline = timeline
        self._seconds = {TO_VERIFIER: to_verifier, TO_DRAFTER: to_drafter}
        self._free_at = {TO_VERIFIER: 0.0, TO_DRAFTER: 0.0}
        self.busy_s = 0.0

    def seconds(self, lane: str, nbytes: int) -> float:
        """How long `nbytes` hold `lane` (latency + bytes / bandwidth), queueing aside."""
        return self._seconds[lane](nbytes)

    def reserve(self, lane: str, nbytes: int) -> tuple[float, float]:
        """Queue a transfer on `lane` now: returns (seconds until it completes, seconds it holds
        the lane: latency + nbytes / bandwidth). The caller waits the first."""
        now = self.env.now
        hold = self._seconds[lane](nbytes)
        start = max(now, self._free_at[lane])
        self._free_at[lane] = start + hold
        self.busy_s += hold
        if self.timeline is not None:
            self.timeline.transfer(lane, start, start + hold, nbytes)
        return start + hold - now, hold


@dataclass(slots=True)
class VerifyJob:
    compute_s: float
    send_bytes: int = 0
    return_bytes: int = 0
    done: simpy.Event | None = None
    transfer_s: float = 0.0  # filled in by the verifier: time spent on the link
    name: str = "verify"     # the target pass's slice on a timeline, and its args
    args: dict[str, Any] | None = None


@dataclass
class Verifier:
    """The target model's TP group: serves VerifyJobs one at a time."""

    env: simpy.Environment
    link: Link
    timeline: Timeline | None = None
    # Slowdown of a pass after the verifier idled this long (sim/overlap.py); None: none.
    after_idle: Callable[[float], float] | None = None
    busy_s: float = 0.0
    _queue: deque[VerifyJob] = field(default_factory=deque)
    _wakeup: simpy.Event | None = None
    _last_end: float = -math.inf

    def __post_init__(self) -> None:
        self.env.process(self._serve())

    def submit(self, job: VerifyJob) -> simpy.Event:
        job.done = self.env.event()
        self._queue.append(job)
        if self._wakeup is not None and not self._wakeup.triggered:
            self._wakeup.succeed()
        return job.done

    def _serve(self) -> Generator[Any, Any, None]:
        while True:
            while not self._queue:
                self._wakeup = self.env.event()
                yield self._wakeup
            job = self._queue.popleft()
            # Inputs arrive, then the target computes: one wait. The lane is reserved now, when
            # the transfer is requested, so FIFO order on the link is what it would be anyway.
            delay = 0.0
            if job.send_bytes:
                delay, hold = self.link.reserve(TO_VERIFIER, job.send_bytes)
                job.transfer_s += hold
            began = self.env.now + delay
            if self.after_idle is not None:
                job.compute_s *= self.after_idle(began - self._last_end)
            yield self.env.timeout(delay + job.compute_s)
            self._last_end = self.env.now
            self.busy_s += job.compute_s
            if self.timeline is not None:
                self.timeline.target_pass(job.name, began, self.env.now, job.args)
            if job.return_bytes:
                delay, hold = self.link.reserve(TO_DRAFTER, job.return_bytes)
                job.transfer_s += hold
                yield self.env.timeout(delay)
            assert job.done is not None
            job.done.succeed()
