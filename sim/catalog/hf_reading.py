"""What every reader of a config.json shares: its error, a value with the key it came from, and a
whole-number key read strictly (a missing or fractional shape is an error, never a default)."""

from __future__ import annotations

from typing import Any

from psdsim.sim.catalog.entries import MAX_NUMBER
from psdsim.sim.numbers import shown

CONFIG_NAME = "config.json"

# A value read from a config.json, with the key (and reasoning) it came from.
Provenanced = tuple[Any, str]


class ConfigError(ValueError):
    """A config.json psdsim cannot turn into a catalog entry; `key` names the offending key
    ("" for the file as a whole)."""

    def __init__(self, key: str, problem: str, fix: str) -> None:
        self.key, self.problem, self.fix = key, problem, fix
        super().__init__(f"{key}: {problem}; fix: {fix}")


def count(cfg: dict[str, Any], name: str, allow_zero: bool = False) -> int:
    """A required whole-number shape key."""
    if name not in cfg or cfg[name] is None:
        raise ConfigError(name, "missing: the catalog entry needs it",
                          f"add \"{name}\" from the model's {CONFIG_NAME}")
    value = cfg[name]
    lowest = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or not lowest <= value <= MAX_NUMBER:
        raise ConfigError(name, f"must be a whole number in {lowest}..{MAX_NUMBER:g}, got {shown(value)}",
                          f"write the model's {name} from its {CONFIG_NAME}")
    return value
