"""The catalog of GPUs, links, models, acceptance priors and dataset profiles.

The built-in numbers live in TOML files beside this module, one entry per table, each with a
`source` naming where it comes from; they load into the frozen dataclasses of schema.py, which
derive what the cost model needs (parameter counts, weight and KV bytes) from a model's published
shape, so that a number is written once and checked against the published counts in the tests. Users
add or override entries with a TOML file of their own (`load_catalog`), in the same format
under tables `[gpus.NAME]`, `[links.NAME]`, `[models.NAME]`, `[datasets.NAME]`,
`[engines.NAME]` and `[acceptance."DRAFT -> TARGET"]`.

A number that its source gives only as a range, or marks as an estimate, carries that range beside
it: `launch_us = 37.0` with `launch_us_range = { low = 25.0, high = 58.0, why = "row 2.13 prior" }`
(or `{ spread = 0.2, why = ... }` for plus or minus 20 %). The point value is what every run uses;
the ranges are only read by `--intervals` (sim/uncertainty.py), which draws inputs from them. So
both ends of a range are held to its field's own bounds, and a range only sits where a draw reads
it (DRAWN): anywhere else it is refused, not dropped.

The package: schema.py (the dataclasses), entries.py (a table's entries read, each held to its
bounds), ranges.py (the ranges), loader.py (the files read, checked and merged); hf_config.py
derives a model from a Hugging Face config.json. The names other modules use are re-exported here.
"""

from __future__ import annotations

from psdsim.sim.catalog.entries import MAX_NUMBER
from psdsim.sim.catalog.loader import CATALOG_FILE, builtin_catalog, load_catalog
from psdsim.sim.catalog.schema import (
    GPU,
    Catalog,
    CatalogError,
    Dataset,
    EngineProfile,
    Link,
    Model,
    vocabulary_mismatch,
)

__all__ = [
    "CATALOG_FILE", "GPU", "MAX_NUMBER", "Catalog", "CatalogError", "Dataset", "EngineProfile", "Link",
    "Model", "builtin_catalog", "load_catalog", "vocabulary_mismatch",
]
