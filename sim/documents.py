"""Parsing the text of a user's TOML or JSON file so that absurd input is one line, not a traceback.

Python's parsers recurse once per level of nesting: `[[[[…]]]]` thousands deep raises
RecursionError (tomllib gives up near 450 levels, json near 1000), and an input too large for
memory raises MemoryError. Neither is a ValueError, so each reader's own checks let them through.
Every reader of a file the user names (scenario, sweep and plan specs, catalog, the validate
manifest, request traces, profiles) parses through `parse_document`; no depth cap is added, so any
file Python can parse still reads, and psdsim's own files need only a few levels.

A JSON object may name a key twice, and json keeps the last value silently; `load_json` refuses
it instead, so that a file never says two things and psdsim picks one without a word.

`read_toml` reads the TOML files a user names by a flag or argument (scenario, sweep spec, plan)
with every way one can be unreadable (a folder, a pipe, bad bytes, bad syntax) as one line.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from psdsim.sim.errors import ScenarioError
from psdsim.sim.input_paths import input_file

T = TypeVar("T")


def parse_document(parse: Callable[[str], T], text: str, field: str, name: str) -> T:
    """`parse(text)` (tomllib.loads, json.loads), with nesting too deep for Python's parser and
    input too large for memory as a ScenarioError naming `field` and the file `name`."""
    try:
        return parse(text)
    except RecursionError:
        raise ScenarioError(field, f"{name} nests lists or tables too deeply to parse",
                            "flatten it: no psdsim file nests more than a few levels") from None
    except MemoryError:
        raise ScenarioError(field, f"{name} is too large to parse in this machine's memory",
                            "give a smaller file") from None


class DuplicateKey(ValueError):
    """A JSON object that names `key` twice: which of its values is meant cannot be known."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    row = dict(pairs)
    if len(row) < len(pairs):
        keys = [key for key, _ in pairs]
        raise DuplicateKey(next(key for key in keys if keys.count(key) > 1))
    return row


def load_json(text: str) -> Any:
    """json.loads, raising DuplicateKey for a key given twice in one object (at any depth)."""
    return json.loads(text, object_pairs_hook=_unique_keys)


def duplicate_key_error(field: str, name: str, exc: DuplicateKey) -> ScenarioError:
    """The one-line refusal of the file `name` for the key `exc` found twice."""
    return ScenarioError(field, f"{name}: key {exc.key!r} given twice (which value is meant?)",
                         "keep one of the two")


def read_toml(p: Path, field_name: str, what: str) -> tuple[str, dict[str, Any]]:
    """(text, document) of a TOML file the user named in `field_name` (scenario, sweep spec,
    plan); every way it can be unreadable is a one-line ScenarioError."""
    input_file(p, field_name, "a TOML file", f"give the path of {what}")  # a pipe would be read forever
    try:
        text = p.read_text(encoding="utf-8")
        return text, parse_document(tomllib.loads, text, field_name, p.name)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(field_name, f"{p.name} is not valid TOML ({exc})",
                            "fix the TOML syntax at the position given") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(field_name, f"cannot read {str(p)!r} ({exc.__class__.__name__})",
                            "give a readable UTF-8 TOML file") from None
