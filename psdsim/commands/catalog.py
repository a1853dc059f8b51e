"""`psdsim catalog`: the built-in GPUs, links, models, datasets and acceptance priors; `psdsim
catalog add CONFIG.json` prints the catalog entry derived from a model's Hugging Face config."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from psdsim.commands.common import user_error

HELP = "list the built-in GPUs, links, models and datasets; `add CONFIG.json` derives a model entry"


def add_arguments(p: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    p.add_argument("action", nargs="?", choices=["add"], metavar="add",
                   help="add: print the catalog entry derived from CONFIG (a Hugging Face config.json, "
                        "or a folder holding one), each field commented with its config key")
    p.add_argument("config", nargs="?", metavar="CONFIG", help="the config.json (or its folder) to add")
    p.add_argument("--key", help="the new entry's catalog key (default: from the model's name)")
    p.add_argument("--json", action="store_true", help="print the catalog (or the derived entry) as JSON")
    p.add_argument("--catalog", help="also merge this catalog file (as a scenario's catalog field)")
    # every other command takes --set: here it is read only to say what to write instead
    p.add_argument("--set", action="append", default=[], help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    if args.set:
        name, _, value = args.set[0].partition("=")
        fix = (f"write --catalog {value}" if name.strip() == "catalog" and value
               else "give a catalog file with --catalog FILE")
        raise user_error("--set", "catalog reads no scenario fields", fix)
    if args.action == "add":
        return _add(args)
    if args.config or args.key:
        raise user_error("--key" if args.key else "CONFIG", "given without add",
                         "write `psdsim catalog add CONFIG.json`")
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


def _add(args: argparse.Namespace) -> int:
    """Print the entry derived from a config.json for the user to review and keep."""
    from psdsim.sim.catalog.hf_config import (
        ConfigError,
        derive_model,
        display_name,
        entry_toml,
        is_config_path,
    )
    from psdsim.sim.scenario import plain_label

    if not args.config:
        raise user_error("CONFIG", "missing", "write `psdsim catalog add path/to/config.json`")
    if args.catalog:
        raise user_error("--catalog", "not used by add", "drop --catalog; add reads only CONFIG")
    try:
        derived = derive_model(args.config)
    except ConfigError as exc:
        where = display_name(args.config) + (f": {exc.key}" if exc.key else "")
        raise user_error(where, exc.problem, exc.fix) from None
    key = args.key or plain_label(derived.model.hf_id.rsplit("/", 1)[-1]).lower()
    if is_config_path(key) or not key.strip():
        raise user_error("--key", f"{key!r} would be read as a path, not a catalog key",
                         "give a key without / and not ending in .json, e.g. --key my-model")
    if args.json:
        entry = {name: getattr(derived.model, name) for name in (*derived.provenance, "source")}
        print(json.dumps({"key": key, "entry": entry, "provenance": derived.provenance,
                          "not_priced": derived.ignored}, indent=2))
    else:
        print(entry_toml(derived, key), end="")
    return 0
