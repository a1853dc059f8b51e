"""Reading the catalog: the built-in TOML files beside this package, and a user's file merged over
them, each table's entries read and checked (sim/catalog/entries.py), the entries checked against
one another, and their ranges read (sim/catalog/ranges.py).
"""

from __future__ import annotations

import tomllib
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from psdsim.sim.catalog.entries import (
    check_engine,
    check_gpu,
    check_link,
    check_model_sizes,
    load_acceptance,
    load_datasets,
    load_group,
)
from psdsim.sim.catalog.ranges import RANGED_TABLES, merged_ranges, ranges_of, refuse_undrawn_ranges
from psdsim.sim.catalog.schema import (
    GPU,
    USER_TABLES,
    Catalog,
    CatalogError,
    EngineProfile,
    Link,
    Model,
    Range,
    RangeKey,
)
from psdsim.sim.documents import parse_document
from psdsim.sim.input_paths import input_file
from psdsim.sim.user_input import bracketed, did_you_mean

# What a user's catalog path must name, and how to fix one that does not
CATALOG_FILE = ("a catalog file", "give the path of a TOML catalog file (sim/catalog/*.toml show the form)")


def _builtin(name: str) -> dict[str, Any]:
    """A catalog file shipped beside this module, read as a file: importlib.resources would add its
    import to every run's start-up, and the package is always installed as files."""
    return tomllib.loads((Path(__file__).parent / name).read_text(encoding="utf-8"))


def _assemble(gpus: dict, links: dict, models: dict, datasets: dict, acceptance: dict,
              engines: dict, filename: str, ranges: dict[RangeKey, Range] | None = None) -> Catalog:
    for key, gpu in gpus.items():
        check_gpu(gpu, links, f"{filename}: GPU {key!r}")
    for key, link in links.items():
        check_link(link, f"{filename}: link {key!r}")
    for key, m in models.items():
        if m.compute not in ("bf16", "fp8"):
            raise CatalogError(f"{filename}: model {key!r}: compute must be 'bf16' or 'fp8'")
        check_model_sizes(key, m, filename)
        if m.moe and not 0 < m.experts_per_token <= m.experts:
            raise CatalogError(f"{filename}: model {key!r}: experts_per_token must be in 1..experts")
        if m.shared_intermediate and not m.moe:
            raise CatalogError(f"{filename}: model {key!r}: shared_intermediate is for MoE models "
                               "(experts > 0)")
    for key, e in engines.items():
        check_engine(e, f"{filename}: engine {key!r}")
    return Catalog(gpus=gpus, links=links, models=models, datasets=datasets, acceptance=acceptance,
                   engines=engines, ranges=ranges or {})


@cache
def builtin_catalog() -> Catalog:
    """The catalog shipped with psdsim (loaded once per process)."""
    doc = {table: _builtin(f"{table}.toml") for table in USER_TABLES}
    for table in USER_TABLES:
        refuse_undrawn_ranges({table: doc[table]}, f"{table}.toml")
    models = load_group(Model, doc["models"], "models.toml")
    cat = _assemble(
        load_group(GPU, doc["gpus"], "gpus.toml"),
        load_group(Link, doc["links"], "links.toml"),
        models,
        load_datasets(doc["datasets"], "datasets.toml"),
        load_acceptance(doc["acceptance"], models, "acceptance.toml"),
        load_group(EngineProfile, doc["engines"], "engines.toml"),
        "built-in catalog",
    )
    ranges: dict[RangeKey, Range] = {}
    for table in (*RANGED_TABLES, "datasets"):
        ranges.update(ranges_of({table: doc[table]}, cat, f"{table}.toml"))
    return replace(cat, ranges=ranges)


@cache
def _user_catalog(path: str, mtime: float) -> Catalog:
    """The built-in catalog with a user's file merged over it (its entries win)."""
    p = Path(path)
    name = p.name
    try:
        doc = parse_document(tomllib.loads, p.read_text(encoding="utf-8"), "catalog", name)
    except (OSError, UnicodeDecodeError) as exc:
        raise CatalogError(f"{name}: cannot read ({exc.__class__.__name__})") from None
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(f"{name}: not valid TOML ({exc})") from None
    unknown = set(doc) - set(USER_TABLES)
    if unknown:
        table = sorted(unknown)[0]
        fix = did_you_mean(table, USER_TABLES, f"use {', '.join(USER_TABLES)}", bracketed)
        raise CatalogError(f"{name}: unknown table [{table}]; {fix}")
    for table in USER_TABLES:
        entries = doc.get(table, {})
        if not isinstance(entries, dict):
            raise CatalogError(f"{name}: [{table}] must be a table of entries ([{table}.KEY] and its "
                               f"fields), got {entries!r}")
        for key, entry in entries.items():
            if not isinstance(entry, dict):
                raise CatalogError(f"{name} [{table}.{key}]: must be a table of fields, got {entry!r}")
    refuse_undrawn_ranges(doc, name)
    base = builtin_catalog()
    models = {**base.models, **load_group(Model, doc.get("models", {}), name)}
    cat = _assemble(
        {**base.gpus, **load_group(GPU, doc.get("gpus", {}), name)},
        {**base.links, **load_group(Link, doc.get("links", {}), name)},
        models,
        {**base.datasets, **load_datasets(doc.get("datasets", {}), name)},
        {**base.acceptance, **load_acceptance(doc.get("acceptance", {}), models, name)},
        {**base.engines, **load_group(EngineProfile, doc.get("engines", {}), name)},
        name,
    )
    return replace(cat, ranges=merged_ranges(base.ranges, doc, ranges_of(doc, cat, name)))


def load_catalog(path: str | Path | None = None) -> Catalog:
    """The built-in catalog, or it with the user's catalog file at `path` merged over it."""
    if not path:
        return builtin_catalog()
    p = input_file(path, "catalog", *CATALOG_FILE)
    return _user_catalog(str(p), p.stat().st_mtime)
