"""`psdsim catalog`: the built-in GPUs, links, models, datasets and acceptance priors."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from psdsim.commands.common import user_error

HELP = "list the built-in GPUs, links, models and datasets"


def add_arguments(p: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    p.add_argument("--json", action="store_true", help="print the catalog as JSON")
    p.add_argument("--catalog", help="also merge this catalog file (as a scenario's catalog field)")


def run(args: argparse.Namespace) -> int:
    from psdsim.sim.catalog import CatalogError, load_catalog
    from psdsim.sim.output.report import catalog_json, format_catalog

    try:
        cat = load_catalog(args.catalog)
    except CatalogError as exc:
        raise user_error("--catalog", str(exc),
                         "correct that entry; the built-in files (sim/catalog/*.toml) show every field "
                         "and its unit") from None
    print(json.dumps(catalog_json(cat), indent=2) if args.json else format_catalog(cat))
    return 0
