"""The verifier group, the drafter GPU(s) and the drafter<->verifier link, as SimPy processes and
resources.

The driver (the engine loop, running on the drafter GPU in PSD) hands the verifier a job: inputs
to send over the link, target compute, a sampler output to send back. The verifier serves jobs
in order, one at a time, by callbacks on its timeouts (a job costs no process switch). The link
has one lane per direction (full duplex: inputs are broadcast to the verifier group, the sampler
output comes back point-to-point from its first rank); each lane is a FIFO single-server
resource: a transfer (its messages, sim/messages.py) waits until the lane is free, then holds it
for each message's latency + bytes / bandwidth, one message after the other.
That is exactly a capacity-1 `simpy.Resource` served in request order, kept as a "free at" time
so that a transfer costs no event at all.

Deterministic FIFO servers need no events of their own: a step that waits for its target pass
and nothing else can disturb (every method but the PSD ring, whose drafter workers may slow a
pass that has started) books the pass at a time of its own (`Verifier.book`): its transfers, its
compute and its return are priced there and then, as SimPy would have timed them, and the step
waits once, for its end (`wait_until`). The ring's steps hand the pass over (`queue`) and wait
for it in SimPy, because drafting that starts meanwhile can push its end later.

The drafter GPUs (`Drafter`) do two kinds of work. Work the driver runs in its own process and
waits for in the same step (MineDraft's driver runs on its drafter GPU; SD's draft shares the
driver's loop) is booked like a target pass (`Drafter.book`): no event of its own. Work handed
to drafter workers (a PSD ring drafts sub-batches in the background, across steps) goes through
a queue, urgent before background and first come first served within each, served by D
processes, one job at a time each (`Drafter.queue`).

The names say which time engine a call needs: `book` prices work at once from a given time and
returns its end (any engine, the plain clock included); `queue` hands it over in SimPy and
returns the event of its end (the ring's runs only). The methods' helpers follow suit
(sim/methods/passes.py: `book_after_pass`, `queue_after_pass`).

When the run records a timeline (sim/timeline.py) each transfer, each target pass and each piece
of drafter work adds a slice with its exact start and end; otherwise the only cost is a None
check.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import simpy

from psdsim.sim.clock import Time
from psdsim.sim.overlap import overlapped

if TYPE_CHECKING:
    from psdsim.sim.timeline import Timeline

TO_VERIFIER = "to_verifier"
TO_DRAFTER = "to_drafter"


def wait_until(env: Time, at: float) -> Generator[Any, Any, None]:
    """Wait until the absolute time `at` (>= now) exactly, in one timeout but in rare cases. A
    step that computes its end as the sum of its parts, in the order the timeouts it replaces
    would have added them, ends on the very same float this way (`at - now` alone can miss it by
    an ulp). Rarely no delay reaches `at` from `now` (now < at / 2 and now + d falls on a tie
    between at and a neighbour, for every d): then it stops one float short of `at`, from where
    the rest is exact (at - that point is exact, Sterbenz's lemma)."""
    now = env.now
    d = at - now
    for _ in range(3):
        reached = now + d
        if reached == at:
            yield env.timeout(d)
            return
        d = math.nextafter(d, math.inf if reached < at else -math.inf)
    while now + d >= at:
        d = math.nextafter(d, -math.inf)
    yield env.timeout(d)
    yield env.timeout(at - env.now)


class Link:
    def __init__(self, env: Time, to_verifier: Callable[[int], float],
                 to_drafter: Callable[[int], float], timeline: Timeline | None = None) -> None:
        self.env = env
        self.timeline = timeline
        self._seconds = {TO_VERIFIER: to_verifier, TO_DRAFTER: to_drafter}
        self._free_at = {TO_VERIFIER: 0.0, TO_DRAFTER: 0.0}
        self.busy_s = 0.0

    def sharing(self, timeline: Timeline | None) -> Link:
        """A view of this link for another engine (a decoupled service's replica): the same lanes,
        queued in one FIFO order, its own transfers recorded on `timeline`."""
        view = Link(self.env, self._seconds[TO_VERIFIER], self._seconds[TO_DRAFTER], timeline)
        view._free_at = self._free_at
        return view

    def seconds(self, lane: str, messages: tuple[int, ...]) -> float:
        """How long `messages` (their sizes in bytes) hold `lane`, one after the other, each its
        latency + bytes / bandwidth; queueing aside."""
        per_message = self._seconds[lane]
        return sum(per_message(nbytes) for nbytes in messages)

    def reserve(self, lane: str, messages: tuple[int, ...], now: float | None = None) -> tuple[float, float]:
        """Queue a transfer of `messages` on `lane` at `now` (default: the simulation's now):
        returns (seconds until it completes, seconds it holds the lane). The caller waits the
        first."""
        if now is None:
            now = self.env.now
        hold = self.seconds(lane, messages)
        free_at = self._free_at
        start = free_at[lane] if free_at[lane] > now else now   # max(now, free_at[lane])
        free_at[lane] = start + hold
        self.busy_s += hold
        if self.timeline is not None:
            self.timeline.transfer(lane, start, start + hold, sum(messages), len(messages))
        return start + hold - now, hold


@dataclass(slots=True)
class VerifyJob:
    """A target pass: its compute, the messages its inputs and its sampler output are sent as
    (sizes in bytes, sim/messages.py; empty: nothing crosses the link)."""

    compute_s: float
    inputs: tuple[int, ...] = ()
    output: tuple[int, ...] = ()
    done: simpy.Event | None = None
    inputs_s: float = 0.0    # filled in by the verifier: time its inputs held the link
    output_s: float = 0.0    # ... and its sampler output
    name: str = "verify"     # the target pass's slice on a timeline, and its args
    args: dict[str, Any] | None = None


@dataclass
class Verifier:
    """The target model's TP group: serves VerifyJobs one at a time. With drafter workers
    (`drafter`), the drafting they do and the pass slow each other (Drafter.contend, slowed_by)."""

    env: Time   # SimPy's environment where passes are queued
    link: Link
    timeline: Timeline | None = None
    # Slowdown of a pass after the verifier idled this long (sim/overlap.py); None: none.
    after_idle: Callable[[float], float] | None = None
    # Drafter workers whose drafting contends with the passes (sim/overlap.py); None: none.
    drafter: Drafter | None = None
    busy_s: float = 0.0
    pass_start: float = math.inf  # the pass computing or about to: when it starts and ends
    pass_end: float = -math.inf
    _job: VerifyJob | None = None  # the job being served
    _queue: deque[VerifyJob] = field(default_factory=deque)
    _last_end: float = -math.inf

    def book(self, job: VerifyJob, at: float, received_from: float | None = None) -> float:
        """Serve `job` from `at`, when the verifier is free and nothing can slow the pass once it
        has started (no drafter workers): its inputs' transfer, compute and output's transfer
        are priced now, as `queue` would time them. Returns when the output is back.
        `received_from`: the driver posts its receive then, busy until; a point-to-point
        transfer moves only once both sides have reached it, so the output leaves at the later
        of the pass's end and that (None: the output leaves when the pass ends)."""
        assert self._job is None, "book() needs a free verifier"
        computed = at + (self._begin(job, at, False) + job.compute_s)
        sent = received_from if received_from is not None and received_from > computed else computed
        back = self._finish(job, computed, sent)
        self.pass_start, self.pass_end = math.inf, -math.inf
        return sent if back is None else sent + back

    def queue(self, job: VerifyJob) -> simpy.Event:
        """Hand `job` over in SimPy: served in order, one at a time, by callbacks on its timeouts
        (a job costs no process switch); the event fires when its output is back."""
        job.done = self.env.event()
        self._queue.append(job)
        if self._job is None:
            self._start()
        return job.done

    def _begin(self, job: VerifyJob, now: float, contend: bool = True) -> float:
        """Start serving `job` at `now`: its inputs cross the link (the lane is reserved when the
        transfer is requested, so FIFO order on the link is what it would be anyway), then the
        target computes, slowed by drafting beside it (`contend`) and after idling. Returns the
        inputs' delay; sets the pass's start and end."""
        delay = 0.0
        if job.inputs:
            delay, job.inputs_s = self.link.reserve(TO_VERIFIER, job.inputs, now)
        self.pass_start = began = now + delay
        if contend and self.drafter is not None:
            job.compute_s = self.drafter.contend(delay, job.compute_s)
        if self.after_idle is not None:
            job.compute_s *= self.after_idle(began - self._last_end)
        self.pass_end = now + (delay + job.compute_s)
        return delay

    def _finish(self, job: VerifyJob, now: float, sent: float | None = None) -> float | None:
        """The pass computed by `now`: count it, and send its output back from `sent` (default:
        now). Returns the return transfer's delay from then, None when nothing goes back."""
        self._last_end = now
        self.busy_s += job.compute_s
        if self.timeline is not None:
            self.timeline.target_pass(job.name, self.pass_start, now, job.args)
        if not job.output:
            return None
        delay, job.output_s = self.link.reserve(TO_DRAFTER, job.output, now if sent is None else sent)
        return delay

    def _start(self) -> None:
        job = self._job = self._queue.popleft()
        delay = self._begin(job, self.env.now)
        self.env.timeout(delay + job.compute_s).callbacks.append(self._computed)

    def _computed(self, _: simpy.Event) -> None:
        now = self.env.now
        if self.pass_end > now:   # drafting that began meanwhile slowed it (slowed_by)
            self.env.timeout(self.pass_end - now).callbacks.append(self._computed)
            return
        assert self._job is not None
        delay = self._finish(self._job, now)
        if delay is None:
            self._returned(None)
        else:
            self.env.timeout(delay).callbacks.append(self._returned)

    def _returned(self, _: simpy.Event | None) -> None:
        job = self._job
        assert job is not None and job.done is not None
        self._job, self.pass_start, self.pass_end = None, math.inf, -math.inf
        job.done.succeed()
        if self._queue:
            self._start()

    def slowed_by(self, drafting: float, overlap: tuple[float, float]) -> float:
        """Drafting of `drafting` seconds alone begins now beside the current pass (if any): its
        wall time; the pass is pushed later by the overlap (sim/overlap.py)."""
        now = self.env.now
        if self._job is None or self.pass_end <= now:   # idle, or sending the sampler output back
            return drafting
        offset = max(0.0, self.pass_start - now)
        left = self.pass_end - max(now, self.pass_start)
        drafting, pass_s = overlapped(drafting, left, offset, *overlap)
        end = now + offset + pass_s
        self._job.compute_s += end - self.pass_end
        self.pass_end = end
        return drafting


@dataclass(slots=True, eq=False)
class DraftJob:
    """Drafting handed to a drafter worker. `size()` -> (seconds alone, slice args) is called
    when a drafter takes the job (a sub-batch is drafted with the members it has then); the
    drafter scales it by its slowdown after idling and calls `finish(seconds it took)` when it is
    done.
    Contention with a target pass that starts meanwhile may push `end_s` (and `seconds`) later
    (sim/methods/passes.py)."""

    name: str
    size: Callable[[], tuple[float, dict[str, Any]]]
    finish: Callable[[float], None]
    done: simpy.Event | None = None
    seconds: float = 0.0
    end_s: float = math.inf
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True, eq=False)
class AfterPassJob:
    """The driver's GPU work after a target pass, handed to a drafter worker: `parts` (timeline
    name, seconds alone) run end to end. The driver started waiting for the pass at
    `waited_from`: the drafter's idle before the job counts from then at the earliest."""

    parts: tuple[tuple[str, float], ...]
    waited_from: float
    done: simpy.Event | None = None
    seconds: float = 0.0
    end_s: float = math.inf


Job = DraftJob | AfterPassJob


class Drafter:
    """The drafter GPU(s): `tracks` names each one's timeline track. Each keeps its slowdown
    after idling (sim/overlap.py: `idle(seconds)` -> factor, None: none), set when it takes up
    the driver's work after a pass and kept until it next does."""

    def __init__(self, env: Time, tracks: list[str], timeline: Timeline | None = None,
                 idle: Callable[[float], float] | None = None, overlap: tuple[float, float] | None = None,
                 verifier: Verifier | None = None, workers: bool = True) -> None:
        self.env = env
        self.overlap = overlap      # (draft, verify) slowdowns while both compute; None: none
        self.verifier = verifier
        self.tracks = tracks
        self.timeline = timeline
        self.idle = idle
        count = len(tracks)
        self.busy_s = 0.0
        self.slowdown = [1.0] * count       # factor on each drafter's work since it last waited
        self.last_end = [0.0] * count       # when each drafter last finished work
        self.running: list[Job | None] = [None] * count
        self._urgent: deque[Job] = deque()
        self._background: deque[Job] = deque()
        self._idle: deque[tuple[int, simpy.Event]] = deque()   # workers waiting for work, in order
        if workers:   # False: only the driver's own drafting (`book`), on a plain clock
            for i in range(count):
                env.process(self._work(i))

    # -- the driver's own drafter work (drafter 0) ---------------------------------------

    def book(self, at: float, seconds: float, name: str, batch: int, k: int,
             sub_batch: int | None = None) -> float:
        """Drafting of `batch` requests, `k` tokens each (of `sub_batch`), that the driver runs on
        drafter 0 from `at` and waits for; returns its end. Only where the drafter has no workers
        in use: the driver's own drafting and theirs do not mix."""
        end = at + seconds
        if self.timeline is not None:
            if sub_batch is None:
                self.timeline.drafting(self.tracks[0], name, at, end, batch=batch, k=k)
            else:
                self.timeline.drafting(self.tracks[0], f"{name} B{sub_batch}", at, end,
                                       sub_batch=sub_batch, batch=batch, k=k)
        return end

    # -- drafter workers ------------------------------------------------------------------

    def queue(self, job: Job, urgent: bool) -> simpy.Event:
        """Queue `job` for the first free drafter; returns the event of its end. Jobs submitted
        in one instant are handed out once the submitter waits, urgent first."""
        job.done = self.env.event()
        (self._urgent if urgent else self._background).append(job)
        if self._idle:
            dispatch = self.env.event()
            dispatch.callbacks.append(self._dispatch)
            dispatch.succeed()
        return job.done

    def _dispatch(self, _: simpy.Event) -> None:
        while self._idle and (self._urgent or self._background):
            i, wake = self._idle.popleft()
            job = (self._urgent or self._background).popleft()
            self._begin(i, job)
            wake.succeed(job)

    def contend(self, delay: float, compute_s: float) -> float:
        """A target pass of `compute_s` alone starts in `delay`: the drafting the workers are
        doing now slows it (returns its wall time) and is pushed later by it (sim/overlap.py)."""
        if self.overlap is None:
            return compute_s
        now, slowed = self.env.now, compute_s
        for job in self.running:
            if isinstance(job, DraftJob) and job.end_s > now:
                left = job.end_s - now
                drafting, pass_s = overlapped(left, compute_s, delay, *self.overlap)
                job.seconds += drafting - left
                job.end_s = now + drafting
                slowed = max(slowed, pass_s)
        return slowed

    def _begin(self, i: int, job: Job) -> None:
        """Drafter `i` takes `job` now: size it and apply its slowdown."""
        now = self.env.now
        if isinstance(job, AfterPassJob):
            if self.idle is not None:
                self.slowdown[i] = self.idle(now - max(self.last_end[i], job.waited_from))
            job.parts = tuple((name, t * self.slowdown[i]) for name, t in job.parts)
            job.seconds = sum(t for _, t in job.parts)
        else:
            alone, job.args = job.size()
            job.seconds = alone * self.slowdown[i]
            if self.overlap is not None and self.verifier is not None:
                job.seconds = self.verifier.slowed_by(job.seconds, self.overlap)
            if self.timeline is not None:
                job.args["step"] = self.timeline.step   # drafting may outlast the step it began in
        job.end_s = now + job.seconds
        self.running[i] = job

    def _work(self, i: int) -> Generator[Any, Any, None]:
        env, tl = self.env, self.timeline
        while True:
            if self._urgent or self._background:
                job = (self._urgent or self._background).popleft()
                self._begin(i, job)
                yield self.env.timeout(0)   # taken up once what ended with the last job has run
            else:
                wake = env.event()
                self._idle.append((i, wake))
                job = yield wake
            began = env.now
            yield env.timeout(job.seconds)
            while job.end_s > env.now:   # a target pass slowed it down meanwhile
                yield env.timeout(job.end_s - env.now)
            self.running[i] = None
            self.last_end[i] = env.now
            self.busy_s += job.seconds
            if isinstance(job, AfterPassJob):
                if tl is not None:
                    tl.drafter_parts(self.tracks[i], began, env.now, job.parts)
            else:
                if tl is not None:
                    tl.drafting(self.tracks[i], job.name, began, env.now, **job.args)
                job.finish(job.seconds)
            assert job.done is not None
            job.done.succeed()
