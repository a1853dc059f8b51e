"""psdsim: simulate batch-parallel speculative decoding (MineDraft-style PSD) and its baselines.

The public Python API, re-exported from the packages that implement it:

    from psdsim import load_scenario, simulate
    result = simulate(load_scenario(overrides=["k=4", "link=nvlink4"]))
    print(result.summary["throughput_tok_s"])
"""

from sim.errors import ScenarioError
from sim.results import write_result
from sim.run import Result, compare_methods, simulate
from sim.scenario import Scenario, load_scenario, scenario_to_toml

__all__ = ["Result", "Scenario", "ScenarioError", "compare_methods", "load_scenario",
           "scenario_to_toml", "simulate", "write_result"]
__version__ = "0.1.0"
