"""Parsing the text of a user's TOML or JSON file so that absurd input is one line, not a traceback.

Python's parsers recurse once per level of nesting: `[[[[…]]]]` thousands deep raises
RecursionError (tomllib gives up near 450 levels, json near 1000), and an input too large for
memory raises MemoryError. Neither is a ValueError, so each reader's own checks let them through.
Every reader of a file the user names (scenario, sweep and plan specs, catalog, the validate
manifest, request traces, profiles) parses through `parse_document`; no depth cap is added, so any
file Python can parse still reads, and psdsim's own files need only a few levels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from psdsim.sim.errors import ScenarioError

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
