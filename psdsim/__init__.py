"""psdsim: simulate batch-parallel speculative decoding (MineDraft-style PSD) and its baselines.

The public Python API, re-exported from the packages that implement it:

    from psdsim import load_scenario, simulate, write_trace
    result = simulate(load_scenario(overrides=["k=4", "link=nvlink4"]), timeline=True)
    print(result.summary["throughput_tok_s"])
    write_trace(result, "timeline.json")  # Chrome trace-event JSON: open it in ui.perfetto.dev
"""

from psdsim.sim.errors import ScenarioError
from psdsim.sim.output.results import write_result
from psdsim.sim.output.timeline import write_trace
from psdsim.sim.run import Result, compare_methods, simulate
from psdsim.sim.scenario import Scenario, load_scenario, scenario_to_toml

__all__ = ["Result", "Scenario", "ScenarioError", "compare_methods", "load_scenario",
           "scenario_to_toml", "simulate", "write_result", "write_trace"]
__version__ = "0.1.0"
