"""Scenarios: one frozen dataclass describing a run, loaded from TOML with strict validation.

The names other modules use, from the modules that each do one job:
- sim/scenario_fields.py: the Scenario dataclass (every field, its table, type, default and
  meaning) and the TOML file that reproduces it;
- sim/scenario_parse.py: reading one from a preset, a TOML file and `--set`;
- sim/scenario_checks.py: whether it can run (types, bounds, rules between fields), and the
  catalog it runs with;
- sim/scenario_values.py: what each field may hold (its type, its choices, its bounds);
- sim/scenario_paths.py: the fields that name files, resolved and refused;
- sim/scenario_caveats.py: what a valid scenario is warned of.
The helpers every reader of user input shares (did-you-mean, tables flattened into fields, typed
values) are in sim/user_input.py.
"""

from __future__ import annotations

from psdsim.sim.documents import read_toml
from psdsim.sim.scenario_caveats import warnings
from psdsim.sim.scenario_checks import catalog_for, validate
from psdsim.sim.scenario_fields import FIELDS, SECTIONS, Scenario, scenario_to_toml, toml_value
from psdsim.sim.scenario_parse import load_scenario, parse_override, scenario_from_mapping
from psdsim.sim.scenario_paths import PATH_FIELDS, path_field_file, resolved_path_field
from psdsim.sim.scenario_values import MAX_CONCENTRATION, MAX_K, MAX_SPAN_S, METHODS, typed_field
from psdsim.sim.user_input import plain_label

__all__ = [
    "FIELDS", "MAX_CONCENTRATION", "MAX_K", "MAX_SPAN_S", "METHODS", "PATH_FIELDS", "SECTIONS",
    "Scenario", "catalog_for", "load_scenario", "parse_override", "path_field_file", "plain_label",
    "read_toml", "resolved_path_field", "scenario_from_mapping", "scenario_to_toml", "toml_value",
    "typed_field", "validate", "warnings",
]
