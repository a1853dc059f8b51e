"""Reading a scenario: a preset, then a TOML file (flat or in its tables), then `--set FIELD=VALUE`
from the command line, each value held to its field's type, paths resolved, the result checked.

Nothing else escapes from loading: every problem is a ScenarioError whose message is one line
naming the field and the fix.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from psdsim.sim.catalog.hf_config import is_config_path
from psdsim.sim.documents import read_toml
from psdsim.sim.errors import ScenarioError
from psdsim.sim.presets import preset_fields
from psdsim.sim.scenario_checks import validate
from psdsim.sim.scenario_fields import FIELDS, SECTIONS, Scenario, field_section
from psdsim.sim.scenario_paths import MODEL_FIELDS, PATH_FIELDS, resolved_path_field
from psdsim.sim.scenario_values import field_example, typed_field
from psdsim.sim.user_input import KIND_NAMES, FieldTables, did_you_mean, parsed, plain_label

# The fix for a name that no field is near
SEE_FIELDS = "see `psdsim scenario` for every field and its value (docs/scenario.md explains them)"
# A scenario's fields, flat or in their tables
SCENARIO_TABLES = FieldTables({name: field_section(name) for name in FIELDS}, SECTIONS, SEE_FIELDS)
NONE_WORDS = ("", "none", "null")   # what `--set FIELD=` may say for an absent optional field


def parse_override(text: str) -> tuple[str, Any]:
    """`FIELD=VALUE` from the command line, VALUE parsed by the field's type."""
    name, sep, raw = text.partition("=")
    name, raw = name.strip(), raw.strip()
    if not sep or not name:
        raise ScenarioError("--set", f"expected FIELD=VALUE, got {text!r}", "write e.g. --set k=4")
    if name not in FIELDS:
        raise ScenarioError(name, "unknown field", did_you_mean(name, FIELDS, SEE_FIELDS))
    f = FIELDS[name]
    kind = f.metadata["kind"]
    if f.metadata["optional"] and raw.lower() in NONE_WORDS:
        return name, None
    try:
        return name, parsed(raw, kind)
    except ValueError:
        if kind is bool:
            raise ScenarioError(name, f"must be true or false, got {raw!r}",
                                f"write --set {name}=true") from None
        raise ScenarioError(name, f"must be {KIND_NAMES[kind]}, got {raw!r}",
                            f"write --set {name}={field_example(f).strip(chr(34))}") from None


def scenario_from_mapping(values: Mapping[str, Any], source: str = "scenario") -> Scenario:
    """Build and validate a scenario from (possibly sectioned) field values."""
    flat = dict(SCENARIO_TABLES.flatten(values, source))   # the layout's errors before the values'
    return validate(Scenario(**{name: typed_field(FIELDS[name], value) for name, value in flat.items()}))


def load_scenario(path: str | Path | None = None, overrides: Iterable[str] = (),
                  method: str | None = None, preset: str | None = None) -> Scenario:
    """A preset (if any), then a scenario file (None = the built-in default), then `--set`."""
    values: dict[str, Any] = preset_fields(preset) if preset else {}
    if path is not None:
        if not str(path):   # Path("") is ".", the current folder: say what was given
            raise ScenarioError("scenario", "the path is empty", "give the path of a .toml scenario, or "
                                "none (None) for the default")
        p = Path(path)
        values.update(SCENARIO_TABLES.flatten(
            read_toml(p, "scenario", "a .toml scenario, or none for the default")[1], p.name))
        if "name" not in values or preset:
            values["name"] = plain_label(p.stem)
        for name in PATH_FIELDS + MODEL_FIELDS:  # relative to the scenario file
            if _is_path(name, values.get(name)):
                values[name] = str(resolved_path_field(name, p.parent / values[name]))
    for text in overrides:
        name, value = parse_override(text)
        if _is_path(name, value):
            value = str(resolved_path_field(name, value))
        values[name] = value
    if method is not None:
        values["method"] = method
    return scenario_from_mapping(values, str(path) if path else "scenario")


def _is_path(name: str, value: Any) -> bool:
    """Whether a field's value is a path to resolve (a model field only if it names a config.json)."""
    if name in MODEL_FIELDS:
        return is_config_path(value)
    return name in PATH_FIELDS and isinstance(value, str) and bool(value)
