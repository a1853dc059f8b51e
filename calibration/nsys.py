"""Nsight Systems SQLite exports (`nsys export --type sqlite`) → step samples.

The join (reference/nsight_vllm.md §1.3, §4.3): a named NVTX range on a thread → the CUDA runtime
calls that thread made inside it → the kernels, memcpys and memsets those calls launched, by
correlationId within the same process. GPU time is the union of those ops' intervals.

Large exports stream: the database is opened read-only and never loaded whole. Only the ranges the
rules match are kept in memory; runtime calls and the range→op join go through temporary tables
and SQL sorts that SQLite spills to disk, and GPU ops arrive one range at a time.

Checks that fail with one clear line (TraceError): not a SQLite file, a corrupt or truncated one,
a database that is not an nsys export (no META_DATA_EXPORT), an unknown schema major version,
missing NVTX or kernel tables, no matching ranges, and traces taken in CUDA-graph mode
(`--cuda-graph-trace=graph`, the default), where a graph replay hides its kernels.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

from psdsim.calibration.phases import COMM_KERNEL, Built, GpuWork, TimedRange, TraceInfo, build_samples
from psdsim.calibration.ranges import RangeRule, classify
from psdsim.calibration.trace_error import TraceError

SQLITE_MAGIC = b"SQLite format 3\x00"
SUPPORTED_SCHEMA_MAJOR = 3
EXPORT_FIX = "export the report with `nsys export --type sqlite`"
NS = 1e-9
RANGE_EVENT_TYPES = ("NvtxPushPopRange", "NvtxStartEndRange")
DEFAULT_EVENT_IDS = {"NvtxPushPopRange": 59, "NvtxStartEndRange": 60}
PID_OF = "(({col}) / 16777216) % 16777216"   # globalTid/globalPid → PID (Analysis Guide layout)


def _connect(path: Path) -> sqlite3.Connection:
    try:
        with path.open("rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise TraceError(path, f"cannot read ({exc.strerror})", "make the file readable") from None
    if not head:
        raise TraceError(path, "empty file", EXPORT_FIX)
    if head != SQLITE_MAGIC:
        raise TraceError(path, "not a SQLite database", EXPORT_FIX)
    try:   # a file URI, escaped: read-only whatever characters (#, ?, %) the name holds
        return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise TraceError(path, f"cannot open as SQLite ({exc})", EXPORT_FIX) from None


def _tables(con: sqlite3.Connection, path: Path) -> set[str]:
    try:
        names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        con.execute("PRAGMA quick_check(1)").fetchone()
    except sqlite3.DatabaseError as exc:
        raise TraceError(path, f"corrupt or truncated SQLite database ({exc})", "export it again") from None
    return names


def _schema_version(con: sqlite3.Connection, tables: set[str], path: Path) -> tuple[str, str]:
    if "META_DATA_EXPORT" not in tables:
        raise TraceError(path, "not an Nsight Systems export (no META_DATA_EXPORT table)",
                         "export the .nsys-rep with `nsys export --type sqlite`")
    meta = dict(con.execute("SELECT name, value FROM META_DATA_EXPORT"))
    version = meta.get("EXPORT_SCHEMA_VERSION")
    if version is None and "EXPORT_SCHEMA_VERSION_MAJOR" in meta:
        version = ".".join(str(meta.get(f"EXPORT_SCHEMA_VERSION_{part}", 0))
                           for part in ("MAJOR", "MINOR", "MICRO"))
    if version is None:
        raise TraceError(path, "META_DATA_EXPORT has no EXPORT_SCHEMA_VERSION: not an nsys export",
                         EXPORT_FIX)
    major = str(version).split(".")[0]
    if major != str(SUPPORTED_SCHEMA_MAJOR):
        raise TraceError(path, f"nsys export schema {version}, but psdsim reads schema "
                         f"{SUPPORTED_SCHEMA_MAJOR}.x (nsys 2021.5-2026.x)", "export with such an nsys")
    return str(version), str(meta.get("EXPORT_PRODUCT_VERSION", ""))


def _require(tables: set[str], name: str, path: Path, why: str) -> None:
    if name not in tables:
        raise TraceError(path, f"no {name} table", why)


# The columns the reader uses and what each may hold. SQLite lets any column hold any type: an
# export edited by hand or written by another tool can put text where nsys writes integers, which
# would otherwise fail deep inside a join as a Python TypeError rather than as one line here.
INT, INT_OR_NULL, TEXT_OR_NULL = ("integer",), ("integer", "null"), ("text", "null")
_GPU_OP = {"start": INT, "end": INT_OR_NULL, "deviceId": INT_OR_NULL, "correlationId": INT_OR_NULL,
           "globalPid": INT_OR_NULL}
COLUMN_TYPES: dict[str, dict[str, tuple[str, ...]]] = {
    "NVTX_EVENTS": {"start": INT, "end": INT_OR_NULL, "globalTid": INT_OR_NULL, "eventType": INT_OR_NULL,
                    "text": TEXT_OR_NULL, "textId": INT_OR_NULL},
    "StringIds": {"id": INT, "value": TEXT_OR_NULL},
    "ENUM_NSYS_EVENT_TYPE": {"id": INT, "name": TEXT_OR_NULL},
    "CUPTI_ACTIVITY_KIND_KERNEL": {**_GPU_OP, "shortName": INT_OR_NULL},
    "CUPTI_ACTIVITY_KIND_MEMCPY": {**_GPU_OP, "bytes": INT_OR_NULL},
    "CUPTI_ACTIVITY_KIND_MEMSET": _GPU_OP,
    "CUPTI_ACTIVITY_KIND_RUNTIME": {"start": INT, "globalTid": INT_OR_NULL, "correlationId": INT_OR_NULL},
    "TARGET_INFO_GPU": {"id": INT, "name": TEXT_OR_NULL},
}


def _check_column_types(con: sqlite3.Connection, tables: set[str], path: Path) -> None:
    """One scan a table (0.2 s of a 400k-kernel export's 1.6 s read), then one query for the culprit."""
    for table, columns in COLUMN_TYPES.items():
        if table not in tables:
            continue
        wrong = {column: f'typeof("{column}") NOT IN ({", ".join(repr(t) for t in allowed)})'
                 for column, allowed in columns.items()}
        found = con.execute(f"SELECT CASE {' '.join(f'WHEN {t} THEN {c!r}' for c, t in wrong.items())} END "
                            f"FROM {table} WHERE {' OR '.join(wrong.values())} LIMIT 1").fetchone()
        if found is not None:
            column = found[0]
            value, kind = con.execute(f'SELECT "{column}", typeof("{column}") FROM {table} '
                                      f"WHERE {wrong[column]} LIMIT 1").fetchone()
            raise TraceError(path, f"{table}.{column} holds {kind} {value!r} where nsys writes "
                             f"{' or '.join(columns[column])}", "export the report again with nsys")


def _event_ids(con: sqlite3.Connection, tables: set[str], info: TraceInfo) -> list[int]:
    if "ENUM_NSYS_EVENT_TYPE" not in tables:
        info.notes.append("no ENUM_NSYS_EVENT_TYPE: assumed NVTX range event types 59 and 60")
        return list(DEFAULT_EVENT_IDS.values())
    rows = con.execute(f"SELECT id FROM ENUM_NSYS_EVENT_TYPE WHERE name IN ({','.join('?' * 2)})",
                       RANGE_EVENT_TYPES).fetchall()
    return [r[0] for r in rows]


def _check_graph_mode(con: sqlite3.Connection, tables: set[str], path: Path) -> None:
    if "CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in tables and con.execute(
            "SELECT 1 FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE LIMIT 1").fetchone():
        raise TraceError(
            path, "recorded with --cuda-graph-trace=graph (nsys's default): each CUDA graph replay is "
            "one row and its kernels are invisible, so phase GPU times cannot be measured",
            "record again with `nsys profile --cuda-graph-trace=node …`")


RawRange = tuple[str, str, dict[str, float], int, int, int]  # name, kind, attributes, tid, start, end (ns)


def _matched_ranges(con: sqlite3.Connection, rules: tuple[RangeRule, ...], event_ids: list[int],
                    dropped: Counter[str], path: Path) -> list[RawRange]:
    ids = ",".join(str(int(i)) for i in event_ids) or "-1"
    rows = con.execute(
        'SELECT n.start, n."end", n.globalTid, COALESCE(n.text, s.value) FROM NVTX_EVENTS n '
        f"LEFT JOIN StringIds s ON s.id = n.textId WHERE n.eventType IN ({ids})")
    out: list[RawRange] = []
    seen_names: Counter[str] = Counter()
    for start, end, tid, name in rows:
        if name is None:
            continue
        hit = classify(rules, name)
        if hit is None:
            if len(seen_names) < 2000 or name in seen_names:
                seen_names[name] += 1
            continue
        if end is None:
            dropped["range without an end (still open when capture stopped)"] += 1
            continue
        out.append((name, hit[0], hit[1], int(tid or 0), int(start), int(end)))
    if not out and dropped:
        raise TraceError(path, f"every matching NVTX range ({sum(dropped.values())}) has no end",
                         "stop the capture after the profiled steps end")
    if not out:
        common = ", ".join(repr(n) for n, _ in seen_names.most_common(6)) or "none"
        raise TraceError(path, f"no NVTX range matches the range rules (most common names: {common})",
                         "choose --ranges PRESET or add --range KIND=REGEX")
    return out


def _comm_name_ids(con: sqlite3.Connection) -> set[int]:
    return {i for i, v in con.execute("SELECT id, value FROM StringIds") if v and COMM_KERNEL.search(v)}


def _gpu_ops(con: sqlite3.Connection, tables: set[str]) -> Iterator[tuple[int, int, int, int, int, int]]:
    """(range row, start ns, end ns, device, bytes, kernel-name id) per GPU op, range by range."""
    parts = []
    for table, nbytes, name in (("CUPTI_ACTIVITY_KIND_KERNEL", "0", "g.shortName"),
                                ("CUPTI_ACTIVITY_KIND_MEMCPY", "g.bytes", "-1"),
                                ("CUPTI_ACTIVITY_KIND_MEMSET", "0", "-1")):
        if table in tables:
            parts.append(
                f'SELECT cr.rid, g.start, g."end", g.deviceId, {nbytes}, {name} FROM {table} g '
                "JOIN temp.corr_rng cr ON cr.corr = g.correlationId "
                f"AND (g.globalPid IS NULL OR {PID_OF.format(col='g.globalPid')} = cr.pid)")
    yield from con.execute(" UNION ALL ".join(parts) + " ORDER BY 1, 2")


def read_nsys(path: str | Path, rules: tuple[RangeRule, ...]) -> tuple[Built, TraceInfo]:
    path = Path(path)
    with closing(_connect(path)) as con:
        try:
            con.execute("PRAGMA temp_store = FILE")     # joins and sorts spill to disk, not to memory
            con.execute("PRAGMA cache_size = -16000")   # 16 MB page cache
            return _read(con, path, rules)
        except sqlite3.DatabaseError as exc:
            raise TraceError(path, f"unreadable nsys export ({exc})", "export it again") from None


def _read(con: sqlite3.Connection, path: Path, rules: tuple[RangeRule, ...]) -> tuple[Built, TraceInfo]:
    tables = _tables(con, path)
    schema, product = _schema_version(con, tables, path)
    info = TraceInfo("nsys", f"{product} (export schema {schema})".strip())
    _require(tables, "NVTX_EVENTS", path, "record with `nsys profile -t cuda,nvtx …`")
    _require(tables, "StringIds", path, "export the whole report (StringIds holds every name)")
    _require(tables, "CUPTI_ACTIVITY_KIND_KERNEL", path,
             "no GPU kernels were traced: record with `nsys profile -t cuda,nvtx …`")
    _require(tables, "CUPTI_ACTIVITY_KIND_RUNTIME", path,
             "no CUDA API calls were traced: record with `nsys profile -t cuda,nvtx …`")
    _check_graph_mode(con, tables, path)
    _check_column_types(con, tables, path)
    if "TARGET_INFO_GPU" in tables:
        info.gpus = {int(i): str(n) for i, n in con.execute("SELECT id, name FROM TARGET_INFO_GPU")}

    dropped: Counter[str] = Counter()
    raw = _matched_ranges(con, rules, _event_ids(con, tables, info), dropped, path)
    base = min(r[4] for r in raw)  # times become seconds since the first matched range

    def sec(ns: int) -> float:
        return (ns - base) * NS

    ranges = [TimedRange(name, kind, attrs, tid, (tid // 16777216) % 16777216, sec(start), sec(end),
                         GpuWork(base, NS)) for name, kind, attrs, tid, start, end in raw]
    con.execute('CREATE TEMP TABLE rng (rid INTEGER PRIMARY KEY, tid INTEGER, start INTEGER, "end" INTEGER)')
    con.executemany("INSERT INTO temp.rng VALUES (?, ?, ?, ?)",
                    ((i, r[3], r[4], r[5]) for i, r in enumerate(raw)))
    con.execute("CREATE TEMP TABLE calls AS SELECT globalTid AS tid, start, correlationId AS corr "
                "FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId IS NOT NULL")
    con.execute("CREATE INDEX temp.calls_by_thread ON calls (tid, start)")
    con.execute("CREATE TEMP TABLE corr_rng AS SELECT c.corr AS corr, "
                f"{PID_OF.format(col='c.tid')} AS pid, r.rid AS rid "
                'FROM temp.rng r CROSS JOIN temp.calls c '
                'ON c.tid = r.tid AND c.start >= r.start AND c.start < r."end"')
    con.execute("CREATE INDEX temp.corr_rng_by_corr ON corr_rng (corr, pid)")

    comm_ids = _comm_name_ids(con)
    current, work = -1, GpuWork()
    for rid, start, end, device, nbytes, name_id in _gpu_ops(con, tables):
        if rid != current:
            current, work = rid, ranges[rid].gpu
        if end is None:
            end = start
        work.add(start, end, -1 if device is None else device, nbytes or 0, name_id in comm_ids)
    info.kernel_s = (con.execute('SELECT TOTAL("end" - start) FROM CUPTI_ACTIVITY_KIND_KERNEL').fetchone()[0]
                     or 0.0) * NS
    attributed = con.execute(
        'SELECT TOTAL(g."end" - g.start) FROM CUPTI_ACTIVITY_KIND_KERNEL g WHERE EXISTS (SELECT 1 FROM '
        "temp.corr_rng cr WHERE cr.corr = g.correlationId "
        f"AND (g.globalPid IS NULL OR {PID_OF.format(col='g.globalPid')} = cr.pid))").fetchone()[0]
    info.attributed_s = (attributed or 0.0) * NS
    built = build_samples(ranges, path.name)
    built.dropped.update(dropped)
    built.notes[:0] = info.notes
    return built, info
