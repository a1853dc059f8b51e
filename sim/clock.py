"""Simulated time without an event queue, for runs whose every step is priced in advance.

Every method but the PSD ring prices a step's parts when it starts (sim/devices.py: `book`) and
waits once, for its end; the engine loop waits for arrivals in between. Nothing else happens in
simulated time, so SimPy's event queue, its process switches and its timeout objects buy nothing
there (about a microsecond a step). `Clock` stands in for `simpy.Environment` in such runs: it
keeps `now`, and `timeout(delay)` moves it to `now + delay` at once, the very float SimPy would
reach, so the same generators (the engine loop, `wait_until`) run unchanged, driven by
`run_clocked` instead of `Environment.run`. The ring's drafter workers work beside the steps and
need SimPy (`EngineMethod.needs_events`). A process that yields anything but a Clock timeout asks
to wait for an event the clock cannot see: `run_clocked` refuses it rather than go on as if it
had happened.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Protocol


class Time(Protocol):
    """What a step asks of simulated time, whichever engine answers (the plain clock or a
    simpy.Environment): the time `now`, and a wait of `delay` to yield (`timeout`). Booking work
    on a device needs nothing more (sim/devices.py: `book`); waiting for an event, by yielding
    it, is SimPy's alone (`queue`), and the plain clock refuses it (`run_clocked`)."""

    @property
    def now(self) -> float: ...

    def timeout(self, delay: float) -> Any: ...


class Clock:
    """`now` and `timeout` of a simpy.Environment, with nothing queued: a timeout has passed by
    the time it is yielded."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now: float = 0   # SimPy's initial time, an int until the first timeout: the same outputs

    def timeout(self, delay: float) -> None:
        """Advance by `delay` (as SimPy times a timeout: now + delay)."""
        self.now = self.now + delay


def run_clocked(process: Generator[Any, Any, None]) -> None:
    """Run a process written for SimPy whose every yield is a Clock timeout (already passed:
    None). Anything else it yields is an event only SimPy can wait for, an error in the method
    that ran on the clock (its `needs_events` must say True)."""
    for waited in process:
        if waited is not None:
            raise RuntimeError(f"a process on the plain clock waited for {waited!r}, which only SimPy "
                               "can wait for: the method that yields it must say needs_events")
