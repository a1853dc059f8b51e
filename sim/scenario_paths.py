"""The scenario fields that name files: which they are, and how each is resolved and refused.

`trace`, `catalog` and `profile` name files; `target` and `draft` name a catalog key or a Hugging
Face config.json. A path field resolves relative to the scenario file that gives it (or to the
working folder for `--set`), and one that the system cannot follow is refused in one line naming
the field.
"""

from __future__ import annotations

from pathlib import Path

from psdsim.sim.catalog import CATALOG_FILE
from psdsim.sim.catalog.hf_config import CONFIG_FILE
from psdsim.sim.input_paths import input_file, input_path

PATH_FIELDS = ("trace", "catalog", "profile")
MODEL_FIELDS = ("target", "draft")   # a catalog key, or the path of a Hugging Face config.json
# What each path field names, for its refusals: (what it must be, how to fix it)
PATH_WHAT = {
    "trace": ("a trace file", "give the path of a JSONL or CSV request trace file"),
    "profile": ("a profile", "give the path of a profile written by `psdsim calibrate … --out profile.json`"),
    "catalog": CATALOG_FILE, "target": CONFIG_FILE, "draft": CONFIG_FILE,
}


def resolved_path_field(name: str, value: str | Path) -> Path:
    """A path field's value (trace, catalog, profile, a target or draft config) made absolute,
    refused in one line naming the field if the system cannot follow it."""
    return input_path(value, name, PATH_WHAT[name][1])


def path_field_file(name: str, value: str | Path) -> Path:
    """The resolved file a path field (trace, profile) names; refused in one line naming the
    field where it names no regular file psdsim can read."""
    return input_file(value, name, *PATH_WHAT[name])

