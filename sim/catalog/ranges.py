"""The ranges a catalog number may carry (`FIELD_range = { low, high, why }`): read, held to the
entry's bounds at both ends, refused where --intervals never draws them, and merged when a user's
file redefines an entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, replace
from typing import Any

from psdsim.sim.catalog.entries import (
    MIN_RATE,
    RANGE_SUFFIX,
    check_alpha,
    check_engine,
    check_gpu,
    check_link,
    check_number,
    checked_component,
)
from psdsim.sim.catalog.schema import USER_TABLES, Catalog, CatalogError, Dataset, Range, RangeKey
from psdsim.sim.numbers import finite

RANGED_TABLES = ("gpus", "links", "acceptance", "engines")   # the tables whose numbers may carry ranges
COMPONENT_RANGES = ("mu", "sigma")   # a dataset's prompt-length component: the fields drawn
# What --intervals draws (sim/uncertainty.py): a range anywhere else would be a number never drawn
DRAWN = ("ranges are drawn on the measured numbers (not the counts) of [gpus.*], [links.*] and "
         "[engines.*] entries, an [acceptance.*] pair's alpha and a [datasets.*] component's mu and sigma")
EntryCheck = Callable[[Any, str], None]   # (an entry, where it is) -> CatalogError if out of bounds


def _load_ranges(table: str, entries: dict[str, Any], tables: dict[str, Any], filename: str,
                 check: EntryCheck) -> dict[RangeKey, Range]:
    """The `FIELD_range` tables of a group's entries (already loaded as `entries`), each checked
    against its field's point value and, at both ends, against the bounds `check` holds the
    entry's values to: a draw is the entry with the field anywhere in its range."""
    out: dict[RangeKey, Range] = {}
    for key, raw in tables.items():
        entry = entries[_entry_key(key)]
        for name, spec in raw.items():
            if name.endswith(RANGE_SUFFIX):
                base, where = name[: -len(RANGE_SUFFIX)], f"{filename} [{key}] {name}"
                rng = _range(spec, _point(entry, base, where), where)
                if table == "gpus" and base == "fp8_tflops" and rng.low < MIN_RATE and rng.high > 0:
                    # 0 (no FP8 tensor cores) and the rates from MIN_RATE up are allowed, the values
                    # between are not: both ends may pass while draws between them are refused
                    raise CatalogError(f"{where}: a range of fp8_tflops must lie at or above {MIN_RATE:g} "
                                       f"TFLOPS (0 means no FP8 tensor cores, not a rate to draw "
                                       f"towards), got [{rng.low:g}, {rng.high:g}]")
                for end, value in (("low", rng.low), ("high", rng.high)):
                    at = f"{where}: its {end} end {value:g}"
                    check_number(base, value, at)
                    check(replace(entry, **{base: value}), at)
                out[(table, _entry_name(key), base)] = rng
    return out


def _entry_key(key: str) -> Any:
    """How an entry is keyed in its group: acceptance pairs by (draft, target), others by name."""
    draft, sep, target = (part.strip() for part in key.partition("->"))
    return (draft, target) if sep else key


def _entry_name(key: str) -> str:
    """An entry's name in a range key: an acceptance pair spelled "DRAFT -> TARGET" however its
    file spaced it."""
    entry = _entry_key(key)
    return " -> ".join(entry) if isinstance(entry, tuple) else key


def _point(entry: Any, base: str, where: str) -> float:
    """The value a range is of: a measured number (a float field); a count is exact, not drawn."""
    value = getattr(entry, base, None)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CatalogError(f"{where}: names no numeric field {base!r}; {DRAWN}")
    if isinstance(value, int):
        raise CatalogError(f"{where}: {base!r} is a count, which is not drawn; {DRAWN}")
    return float(value)


def _range(spec: Any, value: float, where: str) -> Range:
    """`{ low, high, why }` or `{ spread, why }` (a relative spread, low = value (1 - spread)), the
    point value inside it, a non-empty reason."""
    shape = set(spec) if isinstance(spec, dict) else set()
    if shape not in ({"low", "high", "why"}, {"spread", "why"}):
        raise CatalogError(f"{where}: write {{ low = L, high = H, why = \"...\" }} or "
                           f"{{ spread = 0.2, why = \"...\" }}, got {spec!r}")
    why = spec["why"]
    numbers = [finite(spec[name]) for name in shape - {"why"}]
    if not isinstance(why, str) or not why.strip() or any(v is None or v < 0 for v in numbers):
        raise CatalogError(f"{where}: needs finite numbers >= 0 and a non-empty why, got {spec!r}")
    if "spread" in spec:
        low, high = value * (1.0 - spec["spread"]), value * (1.0 + spec["spread"])
    else:
        low, high = float(spec["low"]), float(spec["high"])
    if not low <= value <= high:
        raise CatalogError(f"{where}: the value {value:g} must lie within [low, high], got "
                           f"[{low:g}, {high:g}]")
    return Range(low, high, why.strip())


def ranges_of(doc: dict[str, Any], cat: Catalog, filename: str) -> dict[RangeKey, Range]:
    """Every range a catalog document declares, checked against the entries `cat` loaded from it."""
    groups = {"gpus": cat.gpus, "links": cat.links, "acceptance": cat.acceptance, "engines": cat.engines}
    checks: dict[str, EntryCheck] = {"gpus": lambda gpu, where: check_gpu(gpu, cat.links, where),
                                     "links": check_link, "acceptance": check_alpha,
                                     "engines": check_engine}
    out: dict[RangeKey, Range] = {}
    for table in RANGED_TABLES:
        out.update(_load_ranges(table, groups[table], doc.get(table, {}), filename, checks[table]))
    return {**out, **_component_ranges(doc.get("datasets", {}), cat.datasets, filename)}


def refuse_undrawn_ranges(doc: dict[str, Any], filename: str) -> None:
    """A `FIELD_range` on a model, on a dataset's own fields, or on a component's weight, which
    --intervals never draws: refused by name (before the entries load, which would drop it or
    call it an unknown field), as the user meant it to count."""
    for key, raw in doc.get("models", {}).items():
        stray = next((name for name in raw if name.endswith(RANGE_SUFFIX)), None)
        if stray is not None:
            raise CatalogError(f"{filename} [{key}] {stray}: a model's shape is exact (its config.json), "
                               f"not drawn; {DRAWN}")
    for key, raw in doc.get("datasets", {}).items():
        comps = raw.get("components", [])
        named = [name for name in raw if name.endswith(RANGE_SUFFIX)]
        named += [f"components[{i}].{name}" for i, comp in enumerate(comps if isinstance(comps, list)
                                                                      else [comps])
                  if isinstance(comp, dict) for name in comp if name.endswith(RANGE_SUFFIX)
                  and name[: -len(RANGE_SUFFIX)] not in COMPONENT_RANGES]
        if named:
            raise CatalogError(f"{filename} [{key}] {named[0]}: not drawn; {DRAWN}")


def _component_ranges(tables: dict[str, Any], datasets: dict[str, Dataset],
                      filename: str) -> dict[RangeKey, Range]:
    """A prompt-length component's `mu_range` or `sigma_range`, keyed by the field's path inside
    its dataset: ("datasets", "sharegpt", "components.0.mu")."""
    out: dict[RangeKey, Range] = {}
    for key, raw in tables.items():
        comps = raw.get("components", [])
        for i, comp in enumerate(comps if isinstance(comps, list) else [comps]):
            for name in COMPONENT_RANGES:
                spec = comp.get(name + RANGE_SUFFIX)
                if spec is not None:
                    component = datasets[key].components[i]
                    where = f"{filename} [{key}] components[{i}].{name}{RANGE_SUFFIX}"
                    rng = _range(spec, getattr(component, name), where)
                    for end, value in (("low", rng.low), ("high", rng.high)):
                        checked_component({**asdict(component), name: value},
                                          f"{where}: its {end} end {value:g}")
                    out[("datasets", key, f"components.{i}.{name}")] = rng
    return out


def merged_ranges(base: dict[RangeKey, Range], doc: dict[str, Any],
                  own: dict[RangeKey, Range]) -> dict[RangeKey, Range]:
    """The built-in ranges of the entries a user's file leaves alone, and the file's own: an entry
    the user redefines keeps only the ranges the user gives it (the built-in range was of the
    built-in value)."""
    redefined = {(table, _entry_name(key)) for table in USER_TABLES for key in doc.get(table, {})}
    return {**{k: r for k, r in base.items() if k[:2] not in redefined}, **own}


