"""What every reader of a user's names and values shares: the scenario, sweep and plan files,
`--set`, the catalog and the engine commands' namespaces.

- `did_you_mean`: the fix for an unknown name, naming the known ones it is nearest to
  (`unknown_table`: the refusal of a table a file may not hold).
- `FieldTables`: a document whose fields may be written flat or grouped in tables (`k = 4` or
  `[run] k = 4`), flattened into its fields, with every unknown, misplaced or twice-given name
  refused in one line.
- `typed` and `parsed`: a TOML value or a `--set` text held to the type of the field it sets
  (int, float, str, bool), by the same rules wherever it is read.
- `plain_label`: text made safe to name a folder.

These used to be written once per reader, and had grown apart in what they suggested and let
through; one copy keeps a misspelling answered alike wherever it is made.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from psdsim.sim.errors import ScenarioError
from psdsim.sim.numbers import integer, number

KIND_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")
MOST_NAMED = 3   # near names a fix suggests: more would read as a list to choose from


def close_names(name: str, known: Iterable[str]) -> list[str]:
    """The known names a misspelt one may mean, at most MOST_NAMED: those it begins (a name typed
    short), then difflib's nearest (a typo)."""
    known = list(known)
    begun = [k for k in known if k.startswith(name)]
    near = difflib.get_close_matches(name, known, n=MOST_NAMED, cutoff=0.6)
    return list(dict.fromkeys(begun + near))[:MOST_NAMED]


def did_you_mean(name: str, known: Iterable[str], otherwise: str,
                 spell: Callable[[str], str] = repr) -> str:
    """The fix for an unknown name: "did you mean 'x'?" (each near name as `spell` writes it),
    or `otherwise` where no known name is near."""
    close = close_names(name, known)
    return f"did you mean {' or '.join(map(spell, close))}?" if close else otherwise


def bracketed(table: str) -> str:
    """A table's name as a TOML file writes its header: [table]."""
    return f"[{table}]"


def unknown_table(key: str, tables: Iterable[str], source: str, otherwise: str) -> ScenarioError:
    """The refusal of a table `[key]` that the file `source` may not hold."""
    return ScenarioError(f"[{key}]", f"unknown table in {source}",
                         did_you_mean(key, tables, otherwise, bracketed))


@dataclass(frozen=True)
class FieldTables:
    """Where each field of a document goes: flat, or in the one table it belongs to."""

    home: Mapping[str, str]    # field -> the table it belongs in
    tables: tuple[str, ...]    # the names whose table value holds fields
    see: str                   # the fix for a name no field is near: where the fields are listed

    def flatten(self, doc: Mapping[str, Any], source: str, where: str = "",
                reserved: Collection[str] = ()) -> Iterator[tuple[str, Any]]:
        """(field, value) of each field `doc` sets, flat or in its table. `where` is the dotted
        name of the table `doc` is in (a sweep's [grid]; empty for a whole file), whose
        `reserved` keys are its own and skipped. In a whole file a table-valued key is a table;
        inside a table it may be a field's inline table, so there it is a field or unknown."""
        given: set[str] = set()
        for key, value in doc.items():
            if key in reserved:
                continue
            if key in self.tables and isinstance(value, dict):
                for sub, subvalue in value.items():
                    self._check_placed(sub, key, source, where)
                    self._once(given, sub, source, where)
                    yield sub, subvalue
            elif isinstance(value, dict) and not where:
                raise unknown_table(key, self.tables, source,
                                    f"use the tables {', '.join(self.tables)} or flat keys")
            elif key in self.home:
                self._once(given, key, source, where)
                yield key, value
            else:
                raise self._unknown(key, "", source, where, reserved)

    def _check_placed(self, name: str, table: str, source: str, where: str) -> None:
        """A name in a table must be a field, and that table's."""
        if name not in self.home:
            raise self._unknown(name, table, source, where)
        home = self.home[name]
        if home != table:
            raise ScenarioError(_dotted(where, table, name), f"belongs in [{home}]",
                                f"move {name} to the [{_dotted(where, home)}] table or write it flat")

    def _unknown(self, name: str, table: str, source: str, where: str,
                 reserved: Collection[str] = ()) -> ScenarioError:
        """A name that is no field (nor one of the `reserved` keys of the table it is in)."""
        label = _dotted(where, table, name)
        if not where:
            return ScenarioError(label, f"unknown field in {source}", did_you_mean(name, self.home, self.see))
        also = f"; [{where}] also takes {', '.join(reserved)}" if reserved else ""
        return ScenarioError(label, f"unknown key in [{_dotted(where, table)}]",
                             did_you_mean(name, [*reserved, *self.home], self.see + also))

    def _once(self, given: set[str], name: str, source: str, where: str) -> None:
        """A field given both flat and in its table would silently lose one of its values."""
        if name in given:
            table = _dotted(where, self.home[name])
            flat, short = (f"in [{where}]",) * 2 if where else ("at the top level", "at the top")
            raise ScenarioError(_dotted(where, name), f"given twice in {source}, {flat} and in [{table}]",
                                f"keep one {name} (in [{table}] or {short}, not both)")
        given.add(name)


def _dotted(*parts: str) -> str:
    return ".".join(part for part in parts if part)


def typed(value: Any, kind: type) -> Any:
    """`value` as a field of type `kind` (int, float, str or bool) holds it, an int accepted where
    a float is wanted. TypeError where its type differs (a bool is no int, an int no bool);
    ValueError where a float is not finite, an integer too large for one included."""
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        try:
            value = float(value)
        except OverflowError:   # TOML and JSON read integers of any length
            raise ValueError(f"{value} is past a float's range") from None
    if isinstance(value, bool) is not (kind is bool) or not isinstance(value, kind):
        raise TypeError(f"not {KIND_NAMES[kind]}")
    if kind is float and not math.isfinite(value):
        raise ValueError(f"{value} is not finite")
    return value


def parsed(text: str, kind: type) -> Any:
    """A `--set` text in the type `kind` names: a bool as true/false, yes/no, on/off or 1/0, an
    int or float in ASCII digits, a string without the quotes a shell passed through. ValueError
    where the text is no such value."""
    if kind is bool:
        lowered = text.lower()
        if lowered in TRUE_WORDS or lowered in FALSE_WORDS:
            return lowered in TRUE_WORDS
        raise ValueError(f"not true or false: {text!r}")
    if kind is int:
        return integer(text)
    if kind is float:
        return number(text)
    return text.strip('"').strip("'")


def plain_label(text: str) -> str:
    """text as a label safe in a folder name (result folders are named after the scenario)."""
    return re.sub(r"[^A-Za-z0-9._+-]+", "-", text).strip(".-") or "my-run"
