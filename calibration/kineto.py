"""PyTorch profiler / Kineto Chrome traces (`*.pt.trace.json[.gz]`) → step samples.

What `torch.profiler` writes, and vLLM with `VLLM_TORCH_PROFILER_DIR` (one file per worker). The
join (reference/nsight_vllm.md §1.7) mirrors calibration.nsys: a `user_annotation` range (a CPU
`record_function` scope) on a thread → the `cuda_runtime` / `cuda_driver` calls that thread made
inside it → the kernels, memcpys and memsets those calls launched, by `args.correlation`. An op
belongs to its range even when it runs after the range closed (async launches, CPU run-ahead), and
to every matched range enclosing its call (nested ranges). GPU time is the union of the ops'
intervals (calibration.phases).

Times are µs floats in the file; samples are seconds since the first matched range starts, which
keeps the float precision of long captures. The file is one JSON document, so it is loaded whole;
the join itself is sorted-list bisection and a correlation-id dictionary, linear in the events.

Checks that fail with one clear line (TraceError): an unreadable, empty, corrupt gzip or non-JSON
(or truncated) file, a gzip file that expands far beyond what a trace does (a gzip bomb), JSON
that is not a Kineto trace, a trace without events, one without GPU kernels (CPU-only
profiling), and one where no `user_annotation` range matches the rules.
"""

from __future__ import annotations

import json
import zlib
from bisect import bisect_left
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psdsim.calibration.phases import COMM_KERNEL, Built, GpuWork, TimedRange, TraceInfo, build_samples
from psdsim.calibration.ranges import RangeRule, classify
from psdsim.calibration.trace_error import TraceError
from psdsim.sim.footprint import available_bytes, size_text
from psdsim.sim.numbers import finite, shown

GZIP_MAGIC = b"\x1f\x8b"
# Trace JSON deflates some tens of times (tests/calibration/test_kineto.py's synthetic trace: about
# 24x); a run of one repeated byte, the gzip bomb, about 1000x, deflate's limit. Output past 200x
# the compressed size is refused, read in 1 MiB steps; 64 MiB is always allowed, so that a small,
# very regular trace is never refused.
GZIP_MAX_RATIO = 200
GZIP_FLOOR_BYTES = 64 * 2**20
GZIP_CHUNK = 2**20
US = 1e-6
# Reading a trace holds its bytes and the document json.loads makes of them: read_kineto's peak
# measured with tracemalloc at 5.9x the file on a 46 MB trace built as tests/calibration/test_kineto.py
# builds them (json.loads alone 4.9x); counted as 8x, an upper bound to refuse by.
MEMORY_PER_TRACE_BYTE = 8
RANGE_CATS = frozenset({"user_annotation"})
# Launching CPU calls and GPU ops, matched case-insensitively; the short names are older Kineto's.
CALL_CATS = frozenset({"cuda_runtime", "cuda_driver", "runtime", "driver"})
KERNEL_CATS = frozenset({"kernel"})
COPY_CATS = frozenset({"gpu_memcpy", "memcpy"})
OP_CATS = KERNEL_CATS | COPY_CATS | {"gpu_memset", "memset"}
WHAT_IT_IS = "give the *.pt.trace.json[.gz] file that torch.profiler (or VLLM_TORCH_PROFILER_DIR) writes"

Ident = int | str
Key = tuple[Ident, Ident]  # (pid, tid)
RawRange = tuple[str, str, dict[str, float], Key, float, float]  # name, kind, attributes, key, ts, dur
Op = tuple[float, float, int, int, bool, bool]  # ts µs, dur µs, device, bytes, comm, kernel


def gunzip_bounded(data: bytes, path: Path, ratio: int = GZIP_MAX_RATIO,
                   floor: int = GZIP_FLOOR_BYTES) -> bytes:
    """`data` (one or more gzip members, as `cat a.gz b.gz` makes) decompressed a chunk at a time,
    refused once the output passes `ratio` times the compressed size (or `floor`, if larger): a
    gzip bomb is refused having used about that much memory, not all it expands to."""
    limit = max(ratio * len(data), floor)
    out: list[bytes] = []
    size = 0
    try:
        while data:
            member = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)   # gzip framing
            chunk = member.decompress(data, GZIP_CHUNK)
            while chunk:
                size += len(chunk)
                if size > limit:
                    raise TraceError(path, f"decompresses to more than {limit:,} bytes, {ratio}x its "
                                     "size: not a profiler's trace", "if it is one, give it decompressed "
                                     "(gunzip it first): an uncompressed trace is read without this bound")
                out.append(chunk)
                chunk = member.decompress(member.unconsumed_tail, GZIP_CHUNK)
            if not member.eof:
                raise EOFError("compressed file ended before the end-of-stream marker was reached")
            data = member.unused_data
    except (EOFError, zlib.error) as exc:
        raise TraceError(path, f"corrupt or truncated gzip file ({exc})",
                         "copy or record the trace again") from None
    return b"".join(out)


def _check_memory(path: Path, size: int) -> None:
    """TraceError when reading `size` bytes of trace JSON would take more memory than this process
    has (sim/footprint.py available_bytes): refused before json.loads, not a MemoryError in it."""
    need, have = size * MEMORY_PER_TRACE_BYTE, available_bytes()
    if have is not None and need > have:
        raise TraceError(path, f"{size_text(size)} of trace JSON take about {size_text(need)} of memory to "
                         f"read, but {size_text(have)} are available", "read it with more memory (a larger "
                         "machine, a higher `ulimit -v`), or profile fewer steps")


def _load(path: Path) -> Any:
    try:
        _check_memory(path, path.stat().st_size)
        data = path.read_bytes()
    except OSError as exc:
        raise TraceError(path, f"cannot read ({exc.strerror or exc})", "make the file readable") from None
    if data[:2] == GZIP_MAGIC:
        data = gunzip_bounded(data, path)
        _check_memory(path, len(data))
    if not data.strip():
        raise TraceError(path, "empty file", f"{WHAT_IT_IS}, after the profiler has stopped")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise TraceError(path, f"not JSON, or truncated JSON ({exc})",
                         f"{WHAT_IT_IS}, and let the profiler finish writing it (a process killed "
                         "mid-write leaves it cut short)") from None


def _events(doc: Any, path: Path) -> tuple[list[Any], dict[str, Any]]:
    if isinstance(doc, list) and (not doc or any(isinstance(e, dict) and "ph" in e for e in doc)):
        events, meta = doc, {}   # the trace-event format's bare list of events
    elif isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        events, meta = doc["traceEvents"], doc
    else:
        raise TraceError(path, "JSON, but not a Kineto trace (no traceEvents list)", WHAT_IT_IS)
    if not events:
        raise TraceError(path, "the trace has no events", "profile a window in which the model runs "
                         "(check the profiler's schedule and that it was stopped, not killed)")
    return events, meta


def _ident(value: Any) -> Ident:
    """A pid, tid or correlation id as an int where it is one (some traces write strings)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return value
    return str(value)


def _gpus(meta: dict[str, Any]) -> dict[int, str]:
    gpus: dict[int, str] = {}
    props = meta.get("deviceProperties")
    if isinstance(props, list):
        for p in props:
            if isinstance(p, dict) and isinstance(_ident(p.get("id")), int):
                gpus[int(_ident(p.get("id")))] = str(p.get("name", ""))
    return gpus


@dataclass
class _Scan:
    """What one pass over the events keeps: matched ranges, launching calls, GPU ops."""

    ranges: list[RawRange] = field(default_factory=list)
    unmatched: Counter[str] = field(default_factory=Counter)    # annotation names no rule matched
    calls: dict[Key, list[tuple[float, Ident]]] = field(default_factory=lambda: defaultdict(list))
    ops: list[tuple[Ident, Op]] = field(default_factory=list)   # (correlation id, op)
    dropped: Counter[str] = field(default_factory=Counter)
    kernels: int = 0
    kernel_us: float = 0.0
    skipped: int = 0                                            # events without a numeric ts
    # the first GPU op whose duration is no time (NaN, infinite, negative, missing): read as 0 s it
    # took its time out of the range around it, which then fit as a faster pass than it ran
    bad_op: str | None = None


def _scan(events: list[Any], rules: tuple[RangeRule, ...]) -> _Scan:
    scan = _Scan()
    for ev in events:
        if not isinstance(ev, dict) or ev.get("ph") != "X" or not isinstance(ev.get("cat"), str):
            continue
        cat = ev["cat"].lower()
        if cat not in RANGE_CATS and cat not in CALL_CATS and cat not in OP_CATS:
            continue
        ts, dur, name = finite(ev.get("ts")), finite(ev.get("dur")), ev.get("name")
        if cat in RANGE_CATS:
            if isinstance(name, str):
                _range(scan, rules, name, ts, dur, (_ident(ev.get("pid")), _ident(ev.get("tid"))))
            continue
        if (dur is None or dur < 0) and scan.bad_op is None:
            scan.bad_op = (f"GPU op {str(name)[:60]!r} at ts {shown(ev.get('ts'))} has duration "
                           f"{shown(ev.get('dur'))}")
        kernel = cat in KERNEL_CATS
        if kernel:
            scan.kernels += 1
            scan.kernel_us += max(dur or 0.0, 0.0)
        args = ev.get("args")
        corr = args.get("correlation") if isinstance(args, dict) else None
        if corr is None:
            continue
        if ts is None:
            scan.skipped += 1
        elif cat in CALL_CATS:
            scan.calls[(_ident(ev.get("pid")), _ident(ev.get("tid")))].append((ts, _ident(corr)))
        else:
            device = _ident(args.get("device"))
            nbytes = _ident(args.get("bytes")) if cat in COPY_CATS else 0
            comm = kernel and isinstance(name, str) and COMM_KERNEL.search(name) is not None
            device = device if isinstance(device, int) else -1
            nbytes = nbytes if isinstance(nbytes, int) and nbytes > 0 else 0
            scan.ops.append((_ident(corr), (ts, max(dur or 0.0, 0.0), device, nbytes, comm, kernel)))
    return scan


def _range(scan: _Scan, rules: tuple[RangeRule, ...], name: str, ts: float | None, dur: float | None,
           key: Key) -> None:
    hit = classify(rules, name)
    if hit is None:
        if len(scan.unmatched) < 2000 or name in scan.unmatched:
            scan.unmatched[name] += 1
    elif ts is None:
        scan.skipped += 1
    elif dur is None or dur < 0:
        scan.dropped["range without a duration (still open when the capture stopped)"] += 1
    else:
        scan.ranges.append((name, hit[0], dict(hit[1]), key, ts, dur))


def _check(scan: _Scan, path: Path) -> None:
    if scan.bad_op is not None:
        raise TraceError(path, f"{scan.bad_op}, not a time in microseconds >= 0",
                         "the trace is corrupt (edited, or written by a failing profiler): record it again")
    if scan.kernels == 0:
        raise TraceError(path, "no GPU kernels in the trace", "record CUDA activity too: "
                         "torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])")
    if scan.ranges:
        return
    if scan.dropped:
        raise TraceError(path, f"every matching user_annotation range ({sum(scan.dropped.values())}) has no "
                         "duration", "stop the profiler after the profiled steps end")
    if not scan.unmatched:
        raise TraceError(path, "no user_annotation (record_function) ranges at all", "for vLLM set "
                         "VLLM_CUSTOM_SCOPES_FOR_PROFILING=1, else wrap the phases in "
                         "torch.profiler.record_function")
    common = ", ".join(repr(n) for n, _ in scan.unmatched.most_common(6))
    raise TraceError(path, f"no user_annotation range matches the range rules (most common names: {common})",
                     "choose --ranges PRESET or add --range KIND=REGEX")


def _owners(scan: _Scan) -> dict[Ident, list[int]]:
    """Correlation id → the matched ranges whose thread made that call inside them (nested: all)."""
    owners: dict[Ident, list[int]] = defaultdict(list)
    by_thread: dict[Key, list[int]] = defaultdict(list)
    for rid, r in enumerate(scan.ranges):
        by_thread[r[3]].append(rid)
    for key, rids in by_thread.items():
        calls = scan.calls.get(key)
        if not calls:
            continue
        calls.sort(key=lambda c: c[0])
        starts = [c[0] for c in calls]
        for rid in rids:
            ts, dur = scan.ranges[rid][4], scan.ranges[rid][5]
            for i in range(bisect_left(starts, ts), bisect_left(starts, ts + dur)):
                owners[calls[i][1]].append(rid)
    return owners


def _notes(scan: _Scan, info: TraceInfo) -> None:
    seen: set[Ident] = set()
    repeated = 0
    for calls in scan.calls.values():
        for _, corr in calls:
            repeated += corr in seen
            seen.add(corr)
    if repeated:
        info.notes.append(f"{repeated} CUDA calls reuse another call's correlation id (traces of several "
                          "processes merged into one file?): their GPU ops count for each such call's ranges")
    if not scan.calls:
        info.notes.append("no cuda_runtime/cuda_driver calls with correlation ids, so no GPU op can be tied "
                          "to a range; record with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]")
    if scan.skipped:
        info.notes.append(f"{scan.skipped} events without a numeric ts were skipped")


def read_kineto(path: str | Path, rules: tuple[RangeRule, ...]) -> tuple[Built, TraceInfo]:
    path = Path(path)
    events, meta = _events(_load(path), path)
    version = meta.get("schemaVersion")
    info = TraceInfo("kineto", "" if version is None else str(version), _gpus(meta))
    scan = _scan(events, rules)
    _check(scan, path)
    _notes(scan, info)

    base = min(r[4] for r in scan.ranges)  # times become seconds since the first matched range

    def rel(us: float) -> float:
        return us - base   # µs since the first range; a sum on a large clock value would lose ns

    keys = sorted({r[3] for r in scan.ranges}, key=lambda k: (str(k[0]), str(k[1])))
    thread_of = {k: i for i, k in enumerate(keys)}
    text_pids = sorted({str(k[0]) for k in keys if not isinstance(k[0], int)})
    process_of = {p: -2 - i for i, p in enumerate(text_pids)}   # -1 means unknown
    ranges = [TimedRange(name, kind, attrs, thread_of[key],
                         key[0] if isinstance(key[0], int) else process_of[str(key[0])],
                         rel(ts) * US, (rel(ts) + dur) * US, GpuWork(0.0, US))
              for name, kind, attrs, key, ts, dur in scan.ranges]

    owners = _owners(scan)
    per_range: dict[int, list[Op]] = defaultdict(list)
    attributed_us = 0.0
    for corr, op in scan.ops:
        rids = owners.get(corr, ())
        for rid in rids:
            per_range[rid].append(op)
        if rids and op[5]:
            attributed_us += op[1]  # once, however many nested ranges own it
    for rid, ops in per_range.items():
        ops.sort(key=lambda o: o[0])
        work = ranges[rid].gpu
        for ts, dur, device, nbytes, comm, _ in ops:
            start = rel(ts)
            work.add(start, start + dur, device, nbytes, comm)

    info.kernel_s = scan.kernel_us * US
    info.attributed_s = attributed_us * US
    built = build_samples(ranges, path.name)
    built.dropped.update(scan.dropped)
    built.notes[:0] = info.notes
    return built, info
