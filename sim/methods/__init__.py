"""One module per decoding method; each executes the engine steps the scheduler plans."""

from __future__ import annotations

from psdsim.sim.methods.adaptive_mode import AdaptiveMode
from psdsim.sim.methods.ar import AutoRegressive
from psdsim.sim.methods.common import EngineMethod
from psdsim.sim.methods.decoupled import DecoupledReplica
from psdsim.sim.methods.pearl import PEARL
from psdsim.sim.methods.pipelined import PipelinedSD
from psdsim.sim.methods.sd import MemoryFairSD, StandardSD
from psdsim.sim.scenario import Scenario

METHODS: dict[str, type[EngineMethod]] = {
    "ar": AutoRegressive, "sd": StandardSD, "sd-2m": MemoryFairSD, "sd-5gpu": StandardSD,
    "psd": PipelinedSD, "psd+tetris": PipelinedSD, "pearl": PEARL, "adaptive": AdaptiveMode,
    "decoupled": DecoupledReplica,
}


def method_class(s: Scenario) -> type[EngineMethod]:
    """The class that runs the scenario's method (EngineMethod: scheduler hooks and a step)."""
    return METHODS[s.method]
