"""The error a config.json reader raises, shared by the shape and the weight-format readers."""

from __future__ import annotations

from typing import Any

# A value read from a config.json, with the key (and reasoning) it came from.
Provenanced = tuple[Any, str]


class ConfigError(ValueError):
    """A config.json psdsim cannot turn into a catalog entry; `key` names the offending key
    ("" for the file as a whole)."""

    def __init__(self, key: str, problem: str, fix: str) -> None:
        self.key, self.problem, self.fix = key, problem, fix
        super().__init__(f"{key}: {problem}; fix: {fix}")
