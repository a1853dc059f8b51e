"""The timeline recorder: slices of simulated work on each resource, recorded as a run goes.

Why: the summary and the step table say how long work took; a timeline shows where a step's time
goes (drafting hidden behind verification or not, the link queueing, the tail where PSD falls back
to sequential steps). Recording is opt-in (`simulate(s, timeline=True)`): the devices and the
methods add a slice only when the run holds a `Timeline`, so a run without one does no extra work,
and a run with one draws the same numbers and gives the same results. A slice is one piece of work
on one resource (a track: the drafter GPU or GPUs, the verifier group, each link lane, the driver)
with its start and end taken from the SimPy clock. Exporting it as a trace file is
sim/output/timeline.py's job.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from psdsim.sim.devices import TO_DRAFTER, TO_VERIFIER

# Tracks (one trace "thread" each). A ring run has one drafter track per drafter GPU.
STEPS, DRIVER, DRAFTER, VERIFIER = "steps", "driver", "drafter", "verifier"
# Slice categories: ON_DRAFTER work is what the summary's drafter_busy counts, ON_VERIFIER what
# verifier_busy counts, ON_LINK the link's transfers; ON_DRIVER and STEP count in neither.
ON_DRAFTER, ON_VERIFIER, ON_LINK, ON_DRIVER, STEP = "drafter", "verifier", "link", "driver", "step"
LANE_NAMES = {TO_VERIFIER: "broadcast inputs", TO_DRAFTER: "sampler output"}
DRAFT_PREFILL, REJECT, OVERHEAD, SWAP = "prefill (draft)", "rejection sampling", "overhead", "swap KV"


def drafter_track(index: int) -> str:
    """The track of drafter GPU `index` in a ring run (D drafters)."""
    return f"{DRAFTER} {index}"


Part = tuple[str, str, str, float]  # (track, name, category, seconds) of work inside one wait


class Slice(NamedTuple):
    track: str
    name: str
    cat: str
    start_s: float
    end_s: float
    args: dict[str, Any]


class Timeline:
    """The slices of one run, in the order they were recorded."""

    def __init__(self) -> None:
        self.step = 0  # the engine step in progress (the engine loop sets it)
        self.slices: list[Slice] = []

    def add(self, track: str, name: str, cat: str, start_s: float, end_s: float, **args: Any) -> None:
        """Work from `start_s` to `end_s` on `track`; zero-length work is no slice. `args` may
        override the step (work that began in an earlier step)."""
        if end_s > start_s:
            self.slices.append(Slice(track, name, cat, start_s, end_s, {"step": self.step, **args}))

    def transfer(self, lane: str, start_s: float, end_s: float, nbytes: int, messages: int) -> None:
        """A transfer on a link lane (its track is the lane): `messages` sent one after the other,
        `nbytes` in all."""
        self.add(lane, LANE_NAMES[lane], ON_LINK, start_s, end_s, bytes=nbytes, messages=messages)

    def target_pass(self, name: str, start_s: float, end_s: float, args: dict[str, Any] | None) -> None:
        """The verifier group's compute for one step (its outcome is added at export)."""
        self.add(VERIFIER, name, ON_VERIFIER, start_s, end_s, **(args or {}))

    def drafting(self, track: str, name: str, start_s: float, end_s: float, **args: Any) -> None:
        """Work on a drafter GPU (what the summary's drafter_busy counts)."""
        self.add(track, name, ON_DRAFTER, start_s, end_s, **args)

    def drafter_parts(self, track: str, start_s: float, end_s: float,
                      parts: Sequence[tuple[str, float]]) -> None:
        """Work on a drafter GPU in one wait: (name, seconds) parts laid end to end."""
        self.after(start_s, end_s, [(track, name, ON_DRAFTER, seconds) for name, seconds in parts])

    def after(self, start_s: float, end_s: float, parts: Sequence[Part]) -> None:
        """Work the simulation waits for as one timeout, `parts` = (track, name, cat, seconds) in
        the order the method sums them: laid end to end, the last ending at `end_s` exactly."""
        elapsed = 0.0
        for i, (track, name, cat, seconds) in enumerate(parts):
            begin = start_s + elapsed
            elapsed += seconds
            self.add(track, name, cat, begin, end_s if i == len(parts) - 1 else start_s + elapsed)


def driver_parts(overhead_s: float, swap_s: float) -> list[Part]:
    """The last parts of every step's final wait: framework overhead, then KV swaps."""
    return [(DRIVER, OVERHEAD, ON_DRIVER, overhead_s), (DRIVER, SWAP, ON_DRIVER, swap_s)]
