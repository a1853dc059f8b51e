"""One module per decoding method; each executes the engine steps the scheduler plans."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Protocol

from sim.methods.ar import AutoRegressive
from sim.methods.common import SimContext
from sim.methods.pearl import PEARL
from sim.methods.psd import ParallelSD
from sim.methods.psd_ring import RingPSD
from sim.methods.sd import MemoryFairSD, StandardSD
from sim.scenario import Scenario
from sim.scheduler import EngineHooks, StepPlan


class Method(Protocol):
    """A decoding method: the scheduler's hooks (EngineHooks) plus a step."""

    uses_drafter: bool

    @staticmethod
    def running_cap(s: Scenario) -> int:
        """Cap on the running set: m, or 2m for PSD."""
        ...

    @staticmethod
    def gpus(s: Scenario) -> int:
        """GPUs the method occupies."""
        ...

    def __init__(self, ctx: SimContext) -> None: ...

    def step(self, plan: StepPlan) -> Generator[Any, Any, None]:
        """Execute one planned engine step in simulated time."""
        ...


METHODS: dict[str, type[EngineHooks]] = {
    "ar": AutoRegressive, "sd": StandardSD, "sd-2m": MemoryFairSD, "sd-5gpu": StandardSD,
    "psd": ParallelSD, "psd+tetris": ParallelSD, "pearl": PEARL,
}


def method_class(s: Scenario) -> Any:
    if s.method == "psd" and not s.sub_batched:
        return RingPSD  # N sub-batches / D drafters beyond MineDraft's 2 and 1
    return METHODS[s.method]
