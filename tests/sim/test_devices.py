"""The devices (sim/devices.py) on hand-built jobs and times: the drafter GPUs in SimPy, and a
booked target pass timed as a submitted one."""

from __future__ import annotations

import math
from itertools import pairwise

import pytest
import simpy
from hypothesis import given
from hypothesis import strategies as st

from psdsim.sim.devices import AfterPassJob, Drafter, DraftJob, Link, Verifier, VerifyJob, wait_until
from psdsim.sim.overlap import overlapped
from psdsim.sim.timeline import Timeline


def _drafter(count: int = 1, **kw):
    env = simpy.Environment()
    tl = Timeline()
    return env, tl, Drafter(env, [f"d{i}" for i in range(count)], tl, **kw)


def _job(name: str, seconds: float, done: list[tuple[str, float]], env: simpy.Environment) -> DraftJob:
    return DraftJob(name, lambda: (seconds, {}), lambda took: done.append((name, env.now)))


def test_urgent_work_goes_first_and_each_drafter_does_one_thing_at_a_time():
    """Jobs submitted in one instant are handed out once the submitter waits: urgent first,
    first come first served within each kind, one job per drafter at a time."""
    env, tl, drafter = _drafter(count=2)
    done: list[tuple[str, float]] = []

    def driver():
        yield env.timeout(1.0)
        for name in ("b1", "b2", "b3"):
            drafter.queue(_job(name, 2.0, done, env), urgent=False)
        yield drafter.queue(_job("urgent", 0.5, done, env), urgent=True)

    env.process(driver())
    env.run()
    assert done == [("urgent", 1.5), ("b1", 3.0), ("b2", 3.5), ("b3", 5.0)]
    assert drafter.busy_s == pytest.approx(6.5)
    for track in ("d0", "d1"):
        spans = sorted((s.start_s, s.end_s) for s in tl.slices if s.track == track)
        assert all(a[1] <= b[0] for a, b in pairwise(spans))


def test_the_driver_work_after_a_pass_is_slowed_by_the_drafter_idling_before_it():
    """A drafter's slowdown is set from its idle time when it takes up the driver's work after a
    pass (counted from its last work, or from when the driver started waiting, the later) and
    applies to its later drafting too."""
    env, _, drafter = _drafter(idle=lambda idle_s: 1.0 + idle_s)
    done: list[tuple[str, float]] = []

    def driver():
        yield drafter.queue(_job("draft", 1.0, done, env), urgent=False)   # 0 -> 1
        yield env.timeout(0.5)                                             # waits for a pass
        yield drafter.queue(AfterPassJob((("reject", 0.2),), waited_from=1.0), urgent=True)
        yield drafter.queue(_job("next", 1.0, done, env), urgent=False)

    env.process(driver())
    env.run()
    assert drafter.slowdown[0] == pytest.approx(1.5)
    assert done[-1] == ("next", pytest.approx(1.5 + 0.2 * 1.5 + 1.5))


FACTORS = (1.4, 1.2)


def _contending(link_s: float) -> tuple[simpy.Environment, Verifier, Drafter]:
    """A verifier and one drafter worker that slow each other by FACTORS while both compute."""
    env = simpy.Environment()
    verifier = Verifier(env, Link(env, lambda n: link_s, lambda n: link_s))
    drafter = Drafter(env, ["d0"], overlap=FACTORS, verifier=verifier)
    verifier.drafter = drafter
    return env, verifier, drafter


def test_drafting_in_flight_and_a_target_pass_slow_each_other():
    """A pass that starts while a drafter worker drafts is priced with the drafting's remaining
    time as sim/overlap.overlapped prices the two (drafting from now, the pass after its inputs
    cross the link); the drafting ends later by what the overlap costs it."""
    env, verifier, drafter = _contending(link_s=0.1)
    done: list[tuple[str, float]] = []
    job = VerifyJob(1.0, inputs=(8,), output=(8,))

    def driver():
        drafter.queue(_job("draft", 3.0, done, env), urgent=False)
        yield env.timeout(1.0)
        yield verifier.queue(job)

    env.process(driver())
    env.run()
    drafting, pass_s = overlapped(2.0, 1.0, 0.1, *FACTORS)
    assert job.compute_s == pytest.approx(pass_s) and pass_s > 1.0
    assert done == [("draft", pytest.approx(1.0 + drafting))] and drafting > 2.0


def test_drafting_that_starts_during_a_pass_pushes_the_pass_later():
    env, verifier, drafter = _contending(link_s=0.0)
    done: list[tuple[str, float]] = []
    job = VerifyJob(2.0)
    ends: list[float] = []

    def driver():
        finished = verifier.queue(job)
        yield env.timeout(0.5)
        drafter.queue(_job("draft", 1.0, done, env), urgent=False)
        yield finished
        ends.append(env.now)

    env.process(driver())
    env.run()
    drafting, left = overlapped(1.0, 1.5, 0.0, *FACTORS)
    assert done == [("draft", pytest.approx(0.5 + drafting))]
    assert ends == [pytest.approx(0.5 + left)] and left > 1.5
    assert verifier.busy_s == pytest.approx(0.5 + left)


def _reached(now: float, at: float) -> tuple[float, int]:
    """Where wait_until brings a clock that starts at `now`, and in how many timeouts."""
    env = simpy.Environment(initial_time=now)
    waits = []

    def driver():
        for timeout in wait_until(env, at):
            waits.append(timeout)
            yield timeout

    env.process(driver())
    env.run()
    return env.now, len(waits)


@given(st.floats(0.0, 1e6), st.floats(0.0, 1e6))
def test_wait_until_lands_on_the_very_float(now, span):
    """A step that sums its parts itself waits with wait_until and must end on the float the
    chain of timeouts it replaces would have reached."""
    at = now + span
    assert _reached(now, at)[0] == at


def test_wait_until_reaches_a_float_no_single_delay_reaches():
    """From 0.0535... no delay d gives now + d == 0.119... (each candidate sum falls on a tie and
    rounds to a neighbour): the clock stops one float short, then takes the exact rest."""
    now, at = 0.05351736525507015, 0.11900536122907497
    d = at - now
    assert now + d != at and now + math.nextafter(d, math.inf) != at
    assert _reached(now, at) == (at, 2)
    assert _reached(0.5, 0.75) == (0.75, 1)   # the common case: one timeout


@given(st.lists(st.tuples(st.floats(0.0, 1.0), st.floats(0.0, 0.2), st.floats(0.0, 0.05),
                          st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=8),
       st.booleans())
def test_a_booked_pass_is_timed_as_a_submitted_one(passes, idle_slowdown):
    """Verifier.book prices a pass from a given time as queue serves it in SimPy: the same end
    (bit for bit), the same link and compute figures, the same timeline slices."""
    after_idle = (lambda idle: 1.0 + min(idle, 1.0) / 10) if idle_slowdown else None

    def served(book: bool):
        env, tl = simpy.Environment(), Timeline()
        link = Link(env, lambda n: 1e-4 + n * 1e-6, lambda n: 2e-4 + n * 1e-6, tl)
        verifier = Verifier(env, link, tl, after_idle)
        ends: list[float] = []
        jobs: list[VerifyJob] = []

        def driver():
            for gap, compute, _, send, back in passes:
                yield env.timeout(gap)
                job = VerifyJob(compute, (send * 1000,), (back * 100,))
                jobs.append(job)
                if book:
                    end = verifier.book(job, env.now)
                    yield from wait_until(env, end)
                else:
                    yield verifier.queue(job)
                ends.append(env.now)

        env.process(driver())
        env.run()
        transfers = [(j.compute_s, j.inputs_s, j.output_s) for j in jobs]
        return ends, transfers, tl.slices, verifier.busy_s, link.busy_s

    assert served(book=True) == served(book=False)
