"""Writing a run's results folder: summary.json, steps.csv, requests.csv, scenario.toml.

Everything is written into a temporary folder beside the destination and renamed into place,
so a results folder is either complete or absent: an interrupted run leaves nothing half-written.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from sim.plots import occupancy_png
from sim.scenario import scenario_to_toml


def _cell(value: Any) -> Any:
    if isinstance(value, (float, np.floating)):
        return "" if math.isnan(value) else repr(float(value))
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, np.integer):
        return int(value)
    return value


def table_csv(columns: Mapping[str, np.ndarray]) -> str:
    """CSV with a header row; floats in shortest round-trip form, NaN as an empty cell."""
    names = list(columns)
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(names)
    for row in zip(*(columns[n].tolist() for n in names), strict=True):
        writer.writerow([_cell(v) for v in row])
    return buf.getvalue()


def write_file(path: Path, content: str | bytes) -> Path:
    """Write one file atomically: a temporary file beside it, then a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content.encode("utf-8") if isinstance(content, str) else content)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def summary_json(summary: Mapping[str, Any]) -> str:
    return json.dumps(summary, indent=2, allow_nan=False) + "\n"


def write_folder(out_dir: Path, files: Mapping[str, str | bytes | Mapping[str, np.ndarray]]) -> Path:
    """Atomically create (or replace) `out_dir` holding `files`: text, bytes, or a table (CSV);
    names may have folders (`figures/a.png`)."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        for name, content in files.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, str):
                (tmp / name).write_text(content, encoding="utf-8")
            elif isinstance(content, bytes):
                (tmp / name).write_bytes(content)
            else:
                (tmp / name).write_text(table_csv(content), encoding="utf-8")
        if out_dir.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old.", dir=out_dir.parent))
            os.replace(out_dir, old / out_dir.name)
            os.replace(tmp, out_dir)
            shutil.rmtree(old)
        else:
            os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def write_result(result: Any, out_dir: Path, plots: bool = False) -> Path:
    """The standard folder of one simulated run (a sim.run.Result); `plots` adds occupancy.png."""
    files: dict[str, str | bytes | Mapping[str, np.ndarray]] = {
        "summary.json": summary_json(result.summary),
        "scenario.toml": scenario_to_toml(result.scenario),
    }
    if result.fits:
        files["steps.csv"] = result.steps
        files["requests.csv"] = result.requests
        if plots:
            files["occupancy.png"] = occupancy_png(result)
    return write_folder(out_dir, files)
