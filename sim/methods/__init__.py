"""One module per decoding method; each executes the engine steps the scheduler plans."""

from __future__ import annotations

from psdsim.sim.methods.ar import AutoRegressive
from psdsim.sim.methods.common import EngineMethod
from psdsim.sim.methods.pearl import PEARL
from psdsim.sim.methods.psd import ParallelSD
from psdsim.sim.methods.psd_ring import RingPSD
from psdsim.sim.methods.sd import MemoryFairSD, StandardSD
from psdsim.sim.scenario import Scenario

METHODS: dict[str, type[EngineMethod]] = {
    "ar": AutoRegressive, "sd": StandardSD, "sd-2m": MemoryFairSD, "sd-5gpu": StandardSD,
    "psd": ParallelSD, "psd+tetris": ParallelSD, "pearl": PEARL,
}


def method_class(s: Scenario) -> type[EngineMethod]:
    """The class that runs the scenario's method (EngineMethod: scheduler hooks and a step)."""
    if s.method == "psd" and not s.sub_batched:
        return RingPSD  # N sub-batches / D drafters beyond MineDraft's 2 and 1
    return METHODS[s.method]
