"""Writing a results folder: a run's summary.json, steps.csv, requests.csv and scenario.toml
(write_result), or any command's folder of files (write_folder).

Everything is written into a temporary folder beside the destination and renamed into place,
so a results folder is either complete or absent: an interrupted run leaves nothing half-written.
The folder it replaces is set aside until the new one is in place, and only under the rule of
overwrite_guard.py, checked under the destination's lock (locks.py)."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from psdsim.sim.output.csv_table import csv_parts
from psdsim.sim.output.locks import output_lock, remove_staging, staging_prefix
from psdsim.sim.output.overwrite_guard import check_contents, check_results_folder
from psdsim.sim.output.own_files import MARKER
from psdsim.sim.output.places import current_umask
from psdsim.sim.output.plots import occupancy_png
from psdsim.sim.scenario import scenario_to_toml


def write_folder(out_dir: Path, files: Mapping[str, str | bytes | Mapping[str, np.ndarray]],
                 command: str, option: str = "--out") -> Path:
    """Atomically create (or replace, under check_results_folder's rule) `out_dir` holding `files`:
    text, bytes, or a table (CSV); names may have folders (`figures/a.png`). The marker file
    records `command` and each file's size and sha256, so that the same command may replace the
    folder later, as long as nobody has changed it."""
    with output_lock(out_dir, option) as out:
        check_results_folder(out_dir, command, option)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=staging_prefix(out), dir=out.parent))
        try:
            written = {name: _write_recorded(tmp / name, content) for name, content in sorted(files.items())}
            marker = {"command": command, "files": written}
            (tmp / MARKER).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
            _follow_umask(tmp)
            _swap_in(tmp, out, lambda aside: check_contents(aside, Path(out_dir), command, option))
        except BaseException:
            remove_staging(tmp)
            raise
    return out


def _write_recorded(path: Path, content: str | bytes | Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Write `content` (text, bytes or a table as CSV) to `path`; return its size and sha256."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pieces: Iterable[str | bytes] = (content,) if isinstance(content, str | bytes) else csv_parts(content)
    digest, size = hashlib.sha256(), 0
    with path.open("wb") as fh:
        for piece in pieces:
            data = piece.encode("utf-8") if isinstance(piece, str) else piece
            fh.write(data)
            digest.update(data)
            size += len(data)
    return {"size": size, "sha256": digest.hexdigest()}


def _swap_in(tmp: Path, out: Path, check: Callable[[Path], None]) -> None:
    """Rename the staged folder `tmp` to `out`, setting aside the folder it replaces until the new
    one is in place: a rename that fails (a read-only folder) puts the old one back and leaves
    nothing beside it. The folder set aside is checked again (`check`, which raises) before it is
    deleted: what appeared in it, or made it, while the new one was staged is put back, untouched."""
    if not out.exists():
        os.replace(tmp, out)   # fails, rather than replaces, where a folder with files appeared meanwhile
        return
    aside = Path(tempfile.mkdtemp(prefix=staging_prefix(out), dir=out.parent))
    try:
        os.replace(out, aside / out.name)
    except BaseException:
        aside.rmdir()
        raise
    try:
        check(aside / out.name)
        os.replace(tmp, out)
    except BaseException:
        os.replace(aside / out.name, out)
        aside.rmdir()
        raise
    remove_staging(aside)


def _follow_umask(folder: Path) -> None:
    """mkdtemp makes 0700 folders; give the results the permissions the user's umask asks for."""
    mask = current_umask()
    folder.chmod(0o777 & ~mask)
    for p in folder.rglob("*"):
        p.chmod((0o777 if p.is_dir() else 0o666) & ~mask)


def summary_json(summary: Mapping[str, Any]) -> str:
    return json.dumps(summary, indent=2, allow_nan=False) + "\n"


def result_files(result: Any, plots: bool = False) -> dict[str, str | bytes | Mapping[str, np.ndarray]]:
    """The standard files of one simulated run (a sim.run.Result); `plots` adds occupancy.png."""
    files: dict[str, str | bytes | Mapping[str, np.ndarray]] = {
        "summary.json": summary_json(result.summary),
        "scenario.toml": scenario_to_toml(result.scenario),
    }
    if result.fits:
        files["steps.csv"] = result.steps
        files["requests.csv"] = result.requests
        if plots:
            files["occupancy.png"] = occupancy_png(result)
    return files


def write_result(result: Any, out_dir: Path, plots: bool = False) -> Path:
    """The standard folder of one simulated run, as `psdsim run` writes it."""
    return write_folder(out_dir, result_files(result, plots), "run")
