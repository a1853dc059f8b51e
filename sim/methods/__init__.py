"""One module per decoding method; each executes the engine steps the scheduler plans."""

from __future__ import annotations

from sim.methods.ar import AutoRegressive
from sim.methods.common import EngineMethod
from sim.methods.pearl import PEARL
from sim.methods.psd import ParallelSD
from sim.methods.psd_ring import RingPSD
from sim.methods.sd import MemoryFairSD, StandardSD
from sim.scenario import Scenario

METHODS: dict[str, type[EngineMethod]] = {
    "ar": AutoRegressive, "sd": StandardSD, "sd-2m": MemoryFairSD, "sd-5gpu": StandardSD,
    "psd": ParallelSD, "psd+tetris": ParallelSD, "pearl": PEARL,
}


def method_class(s: Scenario) -> type[EngineMethod]:
    """The class that runs the scenario's method (EngineMethod: scheduler hooks and a step)."""
    if s.method == "psd" and not s.sub_batched:
        return RingPSD  # N sub-batches / D drafters beyond MineDraft's 2 and 1
    return METHODS[s.method]
