"""Synthetic Nsight Systems exports with known ground truth, and simulated runs written as one.

psdsim cannot record GPU traces on its CI machines, so the readers are checked on SQLite files
built here with the real nsys export schema (the tables and columns of reference/nsight_vllm.md
§1.2, schema 3.16.1 as nsys 2024.6.2 writes it) and GPU times chosen by the caller.

`CostLog` wraps a simulator cost model and records every query with its answer; `write_cost_trace`
lays those out as an nsys export in the `psdsim` range convention (drafter on its own GPU and
process, each target pass on every TP rank, transfers as memcpys with their byte counts). That
is the calibration round trip: simulate → export → calibrate → re-simulate.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from psdsim.sim.costs import NO_CHUNKS, Chunks, StepCost

PUSH_POP, START_END = 59, 60
# The export's tables and columns (nsys 2024.6.2, schema 3.16.1), as `CREATE TABLE` statements.
DDL = """
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE ThreadNames (nameId INTEGER, priority INTEGER, globalTid INTEGER);
CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);
CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE TARGET_INFO_GPU (vmId INTEGER, id INTEGER, name TEXT, busLocation TEXT,
    isDiscrete INTEGER, l2CacheSize INTEGER, totalMemory INTEGER, memoryBandwidth INTEGER,
    clockRate INTEGER, smCount INTEGER, pwGpuId INTEGER, uuid TEXT, luid INTEGER, chipName TEXT,
    cuDevice INTEGER, computeMajor INTEGER, computeMinor INTEGER);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, "end" INTEGER, eventType INTEGER NOT NULL,
    rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER,
    endGlobalTid INTEGER, textId INTEGER, domainId INTEGER, uint64Value INTEGER, int64Value INTEGER,
    doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, floatValue REAL, jsonTextId INTEGER,
    jsonText TEXT, binaryData TEXT);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, "end" INTEGER NOT NULL,
    eventClass INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER, returnValue INTEGER,
    callchainId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, "end" INTEGER NOT NULL,
    deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER,
    streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER,
    launchType INTEGER, cacheConfig INTEGER, registersPerThread INTEGER, gridX INTEGER, gridY INTEGER,
    gridZ INTEGER, blockX INTEGER, blockY INTEGER, blockZ INTEGER, staticSharedMemory INTEGER,
    dynamicSharedMemory INTEGER, localMemoryPerThread INTEGER, localMemoryTotal INTEGER,
    gridId INTEGER, sharedMemoryExecuted INTEGER, graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, "end" INTEGER NOT NULL,
    deviceId INTEGER NOT NULL, contextId INTEGER, greenContextId INTEGER, streamId INTEGER,
    correlationId INTEGER, globalPid INTEGER, bytes INTEGER, copyKind INTEGER, deprecatedSrcId INTEGER,
    srcKind INTEGER, dstKind INTEGER, srcDeviceId INTEGER, srcContextId INTEGER, dstDeviceId INTEGER,
    dstContextId INTEGER, migrationCause INTEGER, graphNodeId INTEGER, virtualAddress INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, "end" INTEGER NOT NULL,
    deviceId INTEGER NOT NULL, contextId INTEGER, greenContextId INTEGER, streamId INTEGER,
    correlationId INTEGER, globalPid INTEGER, value INTEGER, bytes INTEGER, graphNodeId INTEGER,
    memKind INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER NOT NULL, "end" INTEGER NOT NULL,
    deviceId INTEGER, contextId INTEGER, greenContextId INTEGER, streamId INTEGER,
    correlationId INTEGER, globalPid INTEGER, graphId INTEGER, graphExecId INTEGER);
"""
SCHEMA = {re.search(r"CREATE TABLE (\w+)", st).group(1): st.strip()  # type: ignore[union-attr]
          for st in DDL.split(";") if st.strip()}
EVENT_TYPES = ((33, "NvtxCategory"), (34, "NvtxMark"), (39, "NvtxThread"), (PUSH_POP, "NvtxPushPopRange"),
               (START_END, "NvtxStartEndRange"), (75, "NvtxDomainCreate"), (76, "NvtxDomainDestroy"))
PTOP = 10   # ENUM_CUDA_MEMCPY_OPER: peer to peer


def global_tid(pid: int, tid: int) -> int:
    """nsys's serialized thread id (hardware and VM ids 0): PID in bits 24-47, TID in bits 0-23."""
    return pid * 16777216 + tid


def create_schema(con: sqlite3.Connection, schema_version: str = "3.16.1",
                  product: str = "2024.6.2.225", skip: Iterable[str] = ()) -> None:
    for table, columns in SCHEMA.items():
        if table not in skip:
            con.execute(columns)
    if "META_DATA_EXPORT" not in skip:
        con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)",
                        [("EXPORT_SCHEMA_VERSION", schema_version), ("EXPORT_PRODUCT_VERSION", product)])
    if "ENUM_NSYS_EVENT_TYPE" not in skip:
        con.executemany("INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES (?, ?, ?)",
                        [(i, n, n) for i, n in EVENT_TYPES])


@dataclass
class GpuOp:
    """One kernel, memcpy or memset, with the CPU time of the call that launched it."""

    start_ns: int
    end_ns: int
    device: int = 0
    kind: str = "kernel"          # kernel | memcpy | memset
    name: str = "sm90_xmma_gemm_bf16"
    nbytes: int = 0
    stream: int = 7
    launch_ns: int | None = None  # default: spread over the range's CPU interval


@dataclass
class NvtxRange:
    name: str
    start_ns: int
    end_ns: int | None
    pid: int = 1000
    tid: int = 1000
    ops: list[GpuOp] = field(default_factory=list)
    registered: bool = False      # name in StringIds via textId (else inline text)
    style: int = PUSH_POP


class NsysWriter:
    """Writes an nsys-schema SQLite export row by row; use as a context manager."""

    def __init__(self, path: str | Path, gpus: dict[int, str] | None = None, **schema: Any) -> None:
        self.con = sqlite3.connect(path)
        create_schema(self.con, **schema)
        self._strings: dict[str, int] = {}
        self._corr = 0
        self._processes: set[int] = set()
        for dev, name in (gpus or {}).items():
            self.con.execute("INSERT INTO TARGET_INFO_GPU (vmId, id, name) VALUES (0, ?, ?)", (dev, name))

    def __enter__(self) -> NsysWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.con.commit()
        self.con.close()

    def string(self, value: str) -> int:
        sid = self._strings.get(value)
        if sid is None:
            sid = self._strings[value] = len(self._strings) + 1
            self.con.execute("INSERT INTO StringIds VALUES (?, ?)", (sid, value))
        return sid

    def _process(self, pid: int) -> None:
        if pid not in self._processes:
            self._processes.add(pid)
            self.con.execute("INSERT INTO PROCESSES VALUES (?, ?, ?)", (pid * 16777216, pid, f"python{pid}"))

    def add_range(self, r: NvtxRange) -> None:
        self._process(r.pid)
        gtid = global_tid(r.pid, r.tid)
        text, text_id = (None, self.string(r.name)) if r.registered else (r.name, None)
        self.con.execute('INSERT INTO NVTX_EVENTS (start, "end", eventType, text, globalTid, endGlobalTid, '
                         "textId, domainId) VALUES (?, ?, ?, ?, ?, ?, ?, 0)",
                         (r.start_ns, r.end_ns, r.style, text, gtid, gtid, text_id))
        span = (r.end_ns if r.end_ns is not None else r.start_ns + 1) - r.start_ns
        for i, op in enumerate(r.ops):
            spread = r.start_ns + span * (i + 1) // (len(r.ops) + 1)
            self.add_op(op, r.pid, r.tid, spread if op.launch_ns is None else op.launch_ns)

    def add_op(self, op: GpuOp, pid: int, tid: int, launch_ns: int) -> None:
        """A GPU op and the runtime call (on `tid`, at `launch_ns`) that launched it."""
        self._process(pid)
        self._corr += 1
        api = {"kernel": "cudaLaunchKernel_v7000", "memcpy": "cudaMemcpyAsync_v3020",
               "memset": "cudaMemsetAsync_v3020"}[op.kind]
        self.con.execute('INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, "end", eventClass, globalTid, '
                         "correlationId, nameId, returnValue) VALUES (?, ?, 1, ?, ?, ?, 0)",
                         (launch_ns, launch_ns + 1500, global_tid(pid, tid), self._corr, self.string(api)))
        common = (op.start_ns, op.end_ns, op.device, 1, op.stream, self._corr, pid * 16777216)
        if op.kind == "kernel":
            name = self.string(op.name)
            self.con.execute('INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, "end", deviceId, contextId, '
                             "streamId, correlationId, globalPid, demangledName, shortName, gridX, gridY, "
                             "gridZ, blockX, blockY, blockZ) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 132, 1, 1, "
                             "128, 1, 1)", (*common, name, name))
        elif op.kind == "memcpy":
            self.con.execute('INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, "end", deviceId, contextId, '
                             "streamId, correlationId, globalPid, bytes, copyKind) VALUES "
                             "(?, ?, ?, ?, ?, ?, ?, ?, ?)", (*common, op.nbytes, PTOP))
        else:
            self.con.execute('INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET (start, "end", deviceId, contextId, '
                             "streamId, correlationId, globalPid, value, bytes) VALUES "
                             "(?, ?, ?, ?, ?, ?, ?, 0, ?)", (*common, op.nbytes))

    def add_graph_replay(self, start_ns: int, end_ns: int, device: int = 0, pid: int = 1000) -> None:
        """A CUDA graph replay as `--cuda-graph-trace=graph` records it: one row, kernels hidden."""
        self._corr += 1
        self.con.execute('INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start, "end", deviceId, streamId, '
                         "correlationId, globalPid, graphId, graphExecId) VALUES (?, ?, ?, 7, ?, ?, 1, 1)",
                         (start_ns, end_ns, device, self._corr, pid * 16777216))


# ---------------------------------------------------------------------------------------------
# Simulated runs as traces


class CostLog:
    """A StepCost that answers like `inner` and records every query: (term, attributes, seconds).

    The methods read `overhead` once per engine step, so each read is logged as one step's
    overhead."""

    def __init__(self, inner: StepCost) -> None:
        self.inner = inner
        self.calls: list[tuple[str, dict[str, float], float]] = []

    def _log(self, term: str, attrs: dict[str, float], seconds: float) -> float:
        self.calls.append((term, attrs, seconds))
        return seconds

    @property
    def overhead(self) -> float:  # type: ignore[override]
        return self._log("overhead", {}, self.inner.overhead)

    def draft(self, batch: int, k: int, ctx: int) -> float:
        return self._log("draft", {"batch": batch, "k": k, "ctx": ctx}, self.inner.draft(batch, k, ctx))

    def verify(self, batch: int, tokens: int, ctx: int, chunks: Chunks = NO_CHUNKS) -> float:
        seconds = self.inner.verify(batch, tokens, ctx, chunks)
        if not batch:
            return self._log("prefill", _chunk_attrs(chunks), seconds)
        attrs = {"batch": batch, "tokens": tokens, "ctx": ctx}
        if chunks.tokens:
            attrs["prefill_tokens"] = chunks.tokens
        return self._log("verify", attrs, seconds)

    def draft_chunks(self, chunks: Chunks) -> float:
        seconds = self.inner.draft_chunks(chunks)
        return self._log("draft_prefill", _chunk_attrs(chunks), seconds) if chunks.tokens else seconds

    def comm(self, nbytes: int) -> float:
        return self._log("comm", {"bytes": nbytes}, self.inner.comm(nbytes))

    def broadcast(self, nbytes: int) -> float:
        return self._log("broadcast", {"bytes": nbytes}, self.inner.broadcast(nbytes))

    def reject(self, positions: int) -> float:
        return self._log("reject", {"positions": positions}, self.inner.reject(positions))

    def swap(self, blocks: int) -> float:
        return self.inner.swap(blocks)


def _chunk_attrs(chunks: Chunks) -> dict[str, float]:
    return {"tokens": chunks.tokens, "pairs": chunks.pairs, "ctx": chunks.ctx}


def range_name(term: str, attrs: dict[str, float]) -> str:
    """`psdsim:TERM key=value …`, the psdsim range convention (calibration.ranges)."""
    words = " ".join(f"{k}={v:.17g}" if isinstance(v, float) else f"{k}={v}" for k, v in attrs.items())
    return f"psdsim:{term} {words}".rstrip()


DRIVER_PID = 4000
RANK_PID = 4001            # verifier ranks are processes RANK_PID + rank on GPUs 0..tp-1
KERNELS_PER_PASS = 3
GAP_NS = 2000              # CPU/GPU gap between consecutive pieces of work


def _pieces(start: int, total: int, parts: int) -> Iterator[tuple[int, int]]:
    """`parts` back-to-back intervals covering [start, start + total) exactly."""
    edges = [start + total * i // parts for i in range(parts + 1)]
    return pairwise(edges)


def write_cost_trace(calls: Iterable[tuple[str, dict[str, float], float]], path: str | Path, *,
                     tp: int = 4, rank_skew: float = 0.01, rng: np.random.Generator | None = None,
                     noise: float = 0.0, outliers: float = 0.0) -> None:
    """Lay out logged cost queries one after another as an nsys export: target passes on every TP
    rank (rank r takes (1 - r * rank_skew) of the time, so the slowest rank holds the truth),
    drafting, rejection sampling and overhead on the driver's GPU `tp`, transfers as peer
    copies. Times round to whole nanoseconds. With `rng`, each piece of work takes its time
    times (1 + noise x a standard normal draw), and a fraction `outliers` of them three times
    as long (a stall), like measurements do."""
    with NsysWriter(path, gpus={d: "NVIDIA L40S" for d in range(tp + 1)}) as w:
        now = 1_000_000
        for term, attrs, seconds in calls:
            if rng is not None:
                stall = 3.0 if rng.random() < outliers else 1.0
                seconds *= max(0.05, 1 + noise * rng.standard_normal()) * stall
            ns = max(1, round(seconds * 1e9))
            name = range_name(term, attrs)
            if term in ("verify", "prefill"):
                for rank in range(tp):
                    dur = max(1, round(ns * (1 - rank * rank_skew)))
                    ops = [GpuOp(a, b, device=rank) for a, b in _pieces(now + 500, dur, KERNELS_PER_PASS)]
                    w.add_range(NvtxRange(name, now, now + 800, RANK_PID + rank, 1, ops))
            elif term in ("comm", "broadcast"):
                pid, dev = (RANK_PID, 0) if term == "comm" else (DRIVER_PID, tp)
                op = GpuOp(now + 500, now + 500 + ns, device=dev, kind="memcpy", nbytes=int(attrs["bytes"]),
                           name="")
                w.add_range(NvtxRange(name, now, now + 800, pid, 1, [op]))
            elif term == "overhead":
                w.add_range(NvtxRange(name, now, now + ns, DRIVER_PID, 1))
            else:
                ops = [GpuOp(a, b, device=tp) for a, b in _pieces(now + 500, ns, KERNELS_PER_PASS)]
                w.add_range(NvtxRange(name, now, now + 800, DRIVER_PID, 1, ops))
            now += 500 + ns + GAP_NS


def write_bulk_trace(path: str | Path, ranges: int, kernels_per_range: int, kernel_ns: int = 10_000) -> None:
    """A large export for streaming checks: `ranges` verify ranges on one thread, each launching
    `kernels_per_range` back-to-back kernels of `kernel_ns`; rows are generated, never held."""
    pid, tid = 1000, 1000
    gtid, gpid = global_tid(pid, tid), pid * 16777216
    per_range = kernels_per_range * kernel_ns + 50_000
    con = sqlite3.connect(path)
    create_schema(con)
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(1, "cudaLaunchKernel_v7000"), (2, "gemm")])
    con.executemany(
        'INSERT INTO NVTX_EVENTS (start, "end", eventType, text, globalTid, domainId) '
        "VALUES (?, ?, ?, ?, ?, 0)",
        ((i * per_range, i * per_range + 20_000, PUSH_POP, f"psdsim:verify batch=16 tokens=64 ctx={i}", gtid)
         for i in range(ranges)))

    def launches() -> Iterator[tuple[int, int, int]]:  # correlation id, launch (CPU), kernel start
        for i in range(ranges):
            for j in range(kernels_per_range):
                yield (i * kernels_per_range + j + 1, i * per_range + 1000 + 10 * j,
                       i * per_range + 30_000 + j * kernel_ns)

    con.executemany('INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, "end", globalTid, correlationId, '
                    f"nameId) VALUES (?2, ?2 + 5, {gtid}, ?1, 1 + 0 * ?3)", launches())
    con.executemany('INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, "end", deviceId, contextId, streamId, '
                    "correlationId, globalPid, demangledName, shortName) "
                    f"VALUES (?3, ?3 + {kernel_ns}, 0, 1, 7, ?1, {gpid} + 0 * ?2, 2, 2)", launches())
    con.commit()
    con.close()
