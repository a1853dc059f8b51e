"""psdsim: simulate batch-parallel speculative decoding (MineDraft-style PSD) and its baselines.

The public Python API, re-exported from the packages that implement it:

    from psdsim import load_scenario, simulate, write_trace
    result = simulate(load_scenario(overrides=["k=4", "link=nvlink4"]), timeline=True)
    print(result.summary["throughput_tok_s"])
    write_trace(result, "timeline.json")  # Chrome trace-event JSON: open it in ui.perfetto.dev

The names are resolved on first use (PEP 562), so that importing a subpackage (`psdsim.sim.x`,
which imports this package first) or starting the `psdsim` command loads no simulator it does
not need.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from psdsim.sim.errors import ScenarioError
    from psdsim.sim.output.results import write_result
    from psdsim.sim.output.timeline import write_trace
    from psdsim.sim.run import Result, compare_methods, simulate
    from psdsim.sim.scenario import Scenario, load_scenario, scenario_to_toml

__all__ = ["Result", "Scenario", "ScenarioError", "compare_methods", "load_scenario",
           "scenario_to_toml", "simulate", "write_result", "write_trace"]
_HOMES = {"ScenarioError": "psdsim.sim.errors", "write_result": "psdsim.sim.output.results",
          "write_trace": "psdsim.sim.output.timeline", "Result": "psdsim.sim.run",
          "compare_methods": "psdsim.sim.run", "simulate": "psdsim.sim.run",
          "Scenario": "psdsim.sim.scenario", "load_scenario": "psdsim.sim.scenario",
          "scenario_to_toml": "psdsim.sim.scenario"}
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'psdsim' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_HOMES])
