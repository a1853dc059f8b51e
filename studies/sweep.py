"""`psdsim sweep`: run a design (sim/sweep_design.py) on an executor, resumably, into one table.

The folder DIR holds:
  sweep.json    what the sweep is (the design's digest, spec, swept fields) and, at the end, counts
                and wall time; a different spec in the same DIR is refused unless `force`
  runs/ID.json  one finished run (status, error, summary), written atomically as soon as it ends,
                so a sweep killed at any moment (kill -9 included) resumes where it stopped
  results.csv   one row per distinct run, in design order, rebuilt from runs/ (and results.parquet
                where pyarrow is installed); no wall-clock times, so reruns give identical tables
  figures/      throughput vs rate per method, and heat maps over (k, m), when those fields vary
Each of these files has its hidden record beside it (sim.output.own_files.record_file), and a sweep
replaces or deletes only those whose record shows it wrote them, unchanged.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from psdsim.sim.errors import ScenarioError
from psdsim.sim.footprint import check_memory
from psdsim.sim.output.atomic_writes import write_file
from psdsim.sim.output.csv_table import table_csv
from psdsim.sim.output.locks import output_lock
from psdsim.sim.output.overwrite_guard import check_record_place, is_own_file, remove_own_file
from psdsim.sim.output.places import landing
from psdsim.sim.run import simulate
from psdsim.sim.scenario import FIELDS, Scenario
from psdsim.studies.executors import run_local, run_ray
from psdsim.studies.sweep_design import Design

STATE = "sweep.json"
RUNS = "runs"
TABLES = ("results.csv", "results.parquet")
FIGURES = "figures"
FIGURE_SUFFIXES = (".png", ".svg")
STATUSES = ("ok", "error", "infeasible")
_RUN_FILE = re.compile(r"^[0-9a-f]{16}\.json$")
Progress = Callable[[int, int, int], None]  # (done, total, failed)


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{exc.__class__.__name__}: {text}" if text else exc.__class__.__name__


def execute(s: Scenario) -> dict[str, Any]:
    """Simulate one run; any exception becomes its record's error (a sweep never stops for one),
    a run too large for the machine's memory or temporary disk included: it is refused, not run."""
    try:
        check_memory([s])
        result = simulate(s)
    except Exception as exc:
        where = traceback.extract_tb(exc.__traceback__)[-1]
        return {"status": "error", "error": f"{one_line(exc)} [{Path(where.filename).name}:{where.lineno}]",
                "summary": None}
    summary = result.summary
    if not result.fits:
        return {"status": "infeasible", "error": summary.get("infeasible_reason"), "summary": summary}
    return {"status": "ok", "error": None, "summary": summary}


def execute_with_intervals(job: tuple[Scenario, int]) -> dict[str, Any]:
    """`execute`, and for a run that ran, `draws` draws of its uncertain inputs (serially: the
    sweep's workers already run several runs at once): every numeric summary figure gains its
    median and 90% interval under the summary's `intervals` key, which the table flattens into
    columns (intervals_throughput_tok_s_low, ...). The record notes `draws`, so that a sweep
    resumed with another N runs those runs again."""
    from psdsim.sim.uncertainty import interval, numeric_paths
    from psdsim.studies.intervals import propagate

    s, draws = job
    record = execute(s)
    if record["status"] == "ok":
        try:
            prop = propagate(s, draws, workers=1)
        except Exception as exc:
            return {"status": "error", "error": f"intervals: {one_line(exc)}", "summary": None,
                    "draws": draws}
        found = {"_".join(p): interval(prop.figure(s.method, p)) for p in numeric_paths(record["summary"])}
        record["summary"]["intervals"] = {k: iv.as_json() for k, iv in found.items() if iv is not None}
    return {**record, "draws": draws}


def _crashed(exc: BaseException) -> dict[str, Any]:
    return {"status": "error", "error": f"the task's worker died: {one_line(exc)}", "summary": None}


# ---------------------------------------------------------------------------------------------
# The folder


class Store:
    """DIR: its identity (sweep.json) and its finished runs (runs/ID.json, one file each)."""

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self.runs = self.out / RUNS

    def claim(self, design: Design, force: bool) -> None:
        """Check that DIR is this sweep's (or new, or `force`) and record the design; the caller
        holds DIR's lock (output_lock). The checks look where the writes land (`new/../mine` is
        `mine`, though `new/` is missing)."""
        real = landing(self.out, "--out")
        self._refuse_what_psdsim_did_not_write(real)
        self._refuse_foreign_records(real, design)
        state = real / STATE
        if state.exists():
            try:
                digest = json.loads(state.read_text(encoding="utf-8")).get("design")
            except (OSError, ValueError, AttributeError):
                digest = None
            if digest != design.digest and not force:
                raise ScenarioError("--out", f"{str(self.out)!r} holds a different sweep (design "
                                    f"{digest}, this spec's is {design.digest})",
                                    "use a new --out DIR, or --force to replace it (runs of unchanged "
                                    "scenarios are kept)")
        elif real.exists() and any(  # a sweep killed before sweep.json is empty
                not (e.name.startswith(".") or e.name == RUNS) for e in real.iterdir()) and not force:
            raise ScenarioError("--out", f"{str(self.out)!r} is not empty and holds no sweep",
                                "use a new or empty --out DIR, or --force to write into it")
        made = [p for p in (real / RUNS, real) if not p.exists()]
        try:
            with self.writing():
                self.runs.mkdir(parents=True, exist_ok=True)
                write_file(state, _state_json(design, {"state": "running"}))
        except ScenarioError:   # a full disk, a read-only folder: leave no empty DIR behind
            for folder in made:
                with contextlib.suppress(OSError):
                    folder.rmdir()
            raise
        wanted = {p.run_id for p in design.runs}
        for path in self.runs.iterdir():  # runs of an older design (each one psdsim wrote: checked above)
            if _RUN_FILE.match(path.name) and path.stem not in wanted:
                remove_own_file(path)

    def _refuse_what_psdsim_did_not_write(self, real: Path) -> None:
        """Refuse, before any run, a DIR holding a file under a name the sweep writes or deletes
        (sweep.json, the tables, runs/ID.json, figures/*.png|svg) that psdsim did not write, or
        that was edited since (each has its record: sim.output.own_files.record_file), and a file
        where its runs/ or figures/ folder goes; with --force too, which writes beside a user's
        files, never over them."""
        for folder in (real / RUNS, real / FIGURES):
            if folder.exists() and not folder.is_dir():
                raise ScenarioError("--out", f"{str(self.out)!r} holds a file {folder.name!r} where the "
                                    "sweep writes a folder", "move it, or use a new --out DIR")
        theirs = sorted(p.relative_to(real).as_posix() for p in sweep_files(real) if not is_own_file(p))
        if theirs:
            raise ScenarioError("--out", f"{str(self.out)!r} holds {', '.join(theirs[:3])}: files psdsim did "
                                "not write, or changed since, that the sweep would replace or delete",
                                "move them, or use a new --out DIR")

    def _refuse_foreign_records(self, real: Path, design: Design) -> None:
        """Refuse, before any run, what is not a psdsim record at the record's name of a file the
        sweep writes (sweep.json, the tables, runs/ID.json): a note of the user's there
        (`runs/.ID.json.psdsim.json`) would otherwise be refused only once the run is done."""
        runs = (real / RUNS / f"{p.run_id}.json" for p in design.runs)
        for path in (real / STATE, *(real / name for name in TABLES), *runs):
            check_record_place(path, path, "--out")

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """An OSError while writing DIR (a full disk, a read-only folder) as one line naming --out."""
        try:
            yield
        except OSError as exc:
            raise ScenarioError("--out", f"cannot write {str(self.out)!r} ({exc.strerror or exc})",
                                "free some space, or choose a writable folder with --out DIR") from None

    def load(self) -> dict[str, dict[str, Any]]:
        """Every finished run on disk (a damaged file is dropped and its run done again)."""
        records = {}
        for path in self.runs.glob("*.json"):
            if not _RUN_FILE.match(path.name):
                continue
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
                ok = record.get("run_id") == path.stem and record.get("status") in STATUSES
            except (OSError, ValueError, AttributeError):
                ok = False
            if ok:
                records[path.stem] = record
            else:
                remove_own_file(path)
        return records

    def save(self, run_id: str, record: dict[str, Any]) -> None:
        with self.writing():
            write_file(self.runs / f"{run_id}.json", json.dumps(record, indent=1) + "\n")


def sweep_files(real: Path) -> list[Path]:
    """The files in the sweep folder `real` under a name a sweep writes, replaces or deletes."""
    runs, figures = real / RUNS, real / FIGURES
    named = [real / STATE, *(real / name for name in TABLES)]
    named += [p for p in (runs.iterdir() if runs.is_dir() else ()) if _RUN_FILE.match(p.name)]
    named += [p for p in (figures.iterdir() if figures.is_dir() else ()) if p.suffix in FIGURE_SUFFIXES]
    return [p for p in named if p.exists() or p.is_symlink()]


def _state_json(design: Design, extra: Mapping[str, Any]) -> str:
    doc = {"design": design.digest, "spec": str(design.path.resolve()), "points": len(design.points),
           "runs": len(design.runs), "swept": design.swept, **extra, "spec_text": design.text}
    return json.dumps(doc, indent=2) + "\n"


# ---------------------------------------------------------------------------------------------
# The table


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping):
        for key, sub in value.items():
            _flatten(f"{prefix}_{key}", sub, out)
    elif isinstance(value, (list, tuple)):
        out[prefix] = "; ".join(str(v) for v in value)
    else:
        out[prefix] = value


def metrics_of(summary: Mapping[str, Any] | None) -> dict[str, Any]:
    """A summary as flat columns: latency_ms.p99 -> latency_ms_p99, lists joined with "; ";
    a key that is also a scenario field (method, k, m, requests) becomes summary_KEY."""
    out: dict[str, Any] = {}
    for key, value in (summary or {}).items():
        _flatten(f"summary_{key}" if key in FIELDS else key, value, out)
    return out


def rows_of(design: Design, records: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per distinct run with a record, in design order: run_id, status, error, the swept
    fields, every other scenario field, then every metric (the union over runs)."""
    inputs = [*design.swept, *(n for n in FIELDS if n not in design.swept)]
    metrics = {p.run_id: metrics_of(records[p.run_id].get("summary"))
               for p in design.runs if p.run_id in records}
    columns: dict[str, None] = {}
    for status in (("ok",), ("infeasible", "error")):  # ok runs' columns first: a stable order
        for p in design.runs:
            if p.run_id in records and records[p.run_id]["status"] in status:
                columns.update(dict.fromkeys(metrics[p.run_id]))
    rows = []
    for p in design.runs:
        if p.run_id not in records:
            continue
        rec, scenario = records[p.run_id], asdict(p.scenario)
        row = {"run_id": p.run_id, "status": rec["status"], "error": rec.get("error")}
        row.update({n: scenario[n] for n in inputs})
        row.update({c: metrics[p.run_id].get(c) for c in columns})
        rows.append(row)
    return rows


def _csv(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "run_id,status,error\n"
    return table_csv({c: np.array([r[c] for r in rows] + [None], dtype=object)[:-1] for c in rows[0]})


def _parquet(rows: list[dict[str, Any]]) -> bytes | None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return None
    cols = {c: [r[c] for r in rows] for c in rows[0]} if rows else {"run_id": []}
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({c: _arrow(pa, v) for c, v in cols.items()}), sink)
    return sink.getvalue().to_pybytes()


def _arrow(pa: Any, values: list[Any]) -> Any:
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # mixed types: keep them as text
        return pa.array([None if v is None else str(v) for v in values], type=pa.string())


def write_tables(out: Path, rows: list[dict[str, Any]]) -> list[Path]:
    paths = [write_file(out / "results.csv", _csv(rows))]
    data = _parquet(rows)
    if data is not None:
        paths.append(write_file(out / "results.parquet", data))
    return paths


# ---------------------------------------------------------------------------------------------
# Running


@dataclass
class Report:
    out: Path
    points: int
    runs: int
    reused: int = 0
    ran: int = 0
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATUSES, 0))
    wall_s: float = 0.0
    files: list[Path] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return self.counts["error"] + self.counts["infeasible"]

    def as_json(self) -> dict[str, Any]:
        return {"out": str(self.out), "points": self.points, "runs": self.runs,
                "duplicates": self.points - self.runs, "reused": self.reused, "ran": self.ran,
                **self.counts, "failed": self.failed, "wall_s": round(self.wall_s, 3),
                "files": [str(p) for p in self.files]}


def _results(todo: list[Scenario], executor: str, workers: int, ray_address: str | None,
             intervals: int | None) -> Iterator[tuple[int, dict[str, Any]]]:
    job: Callable[[Any], dict[str, Any]] = execute
    items: list[Any] = list(todo)
    if intervals is not None:   # one picklable argument per job, as the executors (and Ray) want
        job, items = execute_with_intervals, [(s, intervals) for s in todo]
    if executor == "ray":
        return run_ray(job, items, workers, ray_address, on_crash=_crashed)
    return run_local(job, items, workers)


def run_sweep(design: Design, out: Path, *, workers: int = 1, executor: str = "local",
              ray_address: str | None = None, force: bool = False, retry_errors: bool = False,
              progress: Progress | None = None,
              intervals: int | None = None) -> tuple[Report, list[dict[str, Any]]]:
    """Run every distinct run of `design` not already finished in `out` (with `intervals` draws
    each, when given); return the report and the table's rows (also written to out/results.csv)."""
    began = time.perf_counter()
    store = Store(out)
    with output_lock(out, "--out"):   # held from the checks to the last write (a no-op if held already)
        store.claim(design, force)
        for stale in TABLES:
            remove_own_file(store.out / stale)
        records = {k: r for k, r in store.load().items() if r.get("draws") == intervals}
        if retry_errors:
            records = {k: r for k, r in records.items() if r["status"] != "error"}
        todo = [p for p in design.runs if p.run_id not in records]
        report = Report(store.out, len(design.points), len(design.runs), reused=len(design.runs) - len(todo))
        done = report.reused
        failed = sum(records[p.run_id]["status"] != "ok" for p in design.runs if p.run_id in records)
        if progress is not None:
            progress(done, len(design.runs), failed)
        for i, record in _results([p.scenario for p in todo], executor, workers, ray_address, intervals):
            record = {"run_id": todo[i].run_id, **record}
            store.save(todo[i].run_id, record)
            records[todo[i].run_id] = record
            done, report.ran = done + 1, report.ran + 1
            failed += record["status"] != "ok"
            if progress is not None:
                progress(done, len(design.runs), failed)
        rows = rows_of(design, records)
        for row in rows:
            report.counts[row["status"]] += 1
        with store.writing():
            report.files = write_tables(store.out, rows)
            report.wall_s = time.perf_counter() - began
            write_file(store.out / STATE, _state_json(design, {
                "state": "done", "executor": executor, "workers": workers, **report.as_json()}))
        return report, rows
