"""The Nsight Systems reader on exports built with the real schema and known GPU times."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from psdsim.calibration.nsys import read_nsys
from psdsim.calibration.ranges import PRESETS, parse_rules
from psdsim.calibration.synthetic import START_END, GpuOp, NsysWriter, NvtxRange
from psdsim.calibration.trace_error import TraceError

PSDSIM = PRESETS["psdsim"]
VLLM = PRESETS["vllm"]
US = 1000  # ns


def _write(path: Path, ranges: list[NvtxRange], **kw: object) -> Path:
    with NsysWriter(path, gpus={0: "NVIDIA H100", 1: "NVIDIA H100"}, **kw) as w:  # type: ignore[arg-type]
        for r in ranges:
            w.add_range(r)
    return path


def _kernels(start_us: int, *durations_us: int, device: int = 0, gap_us: int = 0) -> list[GpuOp]:
    ops, t = [], start_us * US
    for d in durations_us:
        ops.append(GpuOp(t, t + d * US, device=device))
        t += d * US + gap_us * US
    return ops


def test_busy_time_is_the_union_of_the_ranges_gpu_ops(tmp_path: Path) -> None:
    r = NvtxRange("psdsim:draft batch=16 k=3 ctx=4096", 0, 50 * US, ops=_kernels(10, 100, 200, 300))
    built, info = read_nsys(_write(tmp_path / "t.sqlite", [r]), PSDSIM)
    (s,) = built.samples
    assert s.kind == "draft"
    assert s.duration_s == pytest.approx(600e-6, rel=1e-12)
    assert (s.batch, s.k, s.ctx) == (16, 3, 4096)
    assert info.gpus == {0: "NVIDIA H100", 1: "NVIDIA H100"}
    assert "2024.6.2" in info.version and "3.16.1" in info.version


@pytest.mark.parametrize("name", ["run#1.sqlite", "a%20b.sqlite", "what?.sqlite"])
def test_file_names_with_uri_characters_open_read_only(tmp_path: Path, name: str) -> None:
    r = NvtxRange("psdsim:draft batch=4 k=2 ctx=64", 0, 50 * US, ops=_kernels(10, 100))
    built, _ = read_nsys(_write(tmp_path / name, [r]), PSDSIM)
    assert len(built.samples) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]   # nothing else created


def test_registered_names_and_inline_text_both_read(tmp_path: Path) -> None:
    a = NvtxRange("psdsim:verify batch=8 tokens=32 ctx=100", 0, 10 * US, ops=_kernels(5, 40), registered=True)
    b = NvtxRange("psdsim:verify batch=8 tokens=32 ctx=200", 100 * US, 110 * US, ops=_kernels(105, 50))
    built, _ = read_nsys(_write(tmp_path / "t.sqlite", [a, b]), PSDSIM)
    assert sorted(s.ctx for s in built.samples) == [100, 200]
    assert sorted(round(s.duration_s * 1e6) for s in built.samples) == [40, 50]


def test_open_ranges_are_dropped_and_counted(tmp_path: Path) -> None:
    closed = NvtxRange("psdsim:draft batch=1 k=1 ctx=1", 0, 10 * US, ops=_kernels(1, 20))
    open_ = NvtxRange("psdsim:draft batch=2 k=1 ctx=1", 100 * US, None, ops=_kernels(101, 20))
    built, _ = read_nsys(_write(tmp_path / "t.sqlite", [closed, open_]), PSDSIM)
    assert [s.batch for s in built.samples] == [1]
    assert built.dropped["range without an end (still open when capture stopped)"] == 1


def test_async_kernels_after_the_cpu_range_belong_to_it(tmp_path: Path) -> None:
    """CPU run-ahead: the range closes after 5 us, its kernels run 1 ms later for 3 ms; the next
    range opens before those kernels even start. GPU time, not CPU length, is measured."""
    first = NvtxRange("psdsim:verify batch=4 tokens=16 ctx=10", 0, 5 * US, ops=_kernels(1000, 1000, 2000))
    second = NvtxRange("psdsim:verify batch=4 tokens=16 ctx=20", 6 * US, 11 * US, ops=_kernels(3000, 700))
    built, _ = read_nsys(_write(tmp_path / "t.sqlite", [first, second]), PSDSIM)
    by_ctx = {s.ctx: s for s in built.samples}
    assert by_ctx[10].duration_s == pytest.approx(3e-3)
    assert by_ctx[20].duration_s == pytest.approx(0.7e-3)
    assert by_ctx[10].start_s == pytest.approx(by_ctx[10].end_s - 3e-3)


def test_overlapping_streams_count_once(tmp_path: Path) -> None:
    ops = [GpuOp(0, 100 * US, stream=7), GpuOp(50 * US, 150 * US, stream=8), GpuOp(300 * US, 310 * US)]
    r = NvtxRange("psdsim:prefill tokens=512 pairs=131072 ctx=0", 0, 5 * US, ops=ops)
    (s,) = read_nsys(_write(tmp_path / "t.sqlite", [r]), PSDSIM)[0].samples
    assert s.duration_s == pytest.approx(160e-6)   # union: 0-150 and 300-310
    assert s.span_s == pytest.approx(310e-6)


def test_vllm_step_range_gives_batch_facts_to_nested_and_following_phases(tmp_path: Path) -> None:
    """vLLM V1: forward runs inside execute_context_…; drafting after the range closes."""
    step = NvtxRange("execute_context_0(0)_generation_16(64)", 0, 20 * US)
    forward = NvtxRange("gpu_model_runner: forward", 2 * US, 18 * US, ops=_kernels(30, 900))
    draft = NvtxRange("gpu_model_runner: draft", 25 * US, 40 * US, ops=_kernels(1000, 300))
    prefill_step = NvtxRange("execute_context_2(700)_generation_0(0)", 2000 * US, 2010 * US)
    prefill = NvtxRange("gpu_model_runner: forward", 2001 * US, 2009 * US, ops=_kernels(2020, 1500))
    path = _write(tmp_path / "t.sqlite", [step, forward, draft, prefill_step, prefill])
    built, info = read_nsys(path, VLLM)
    assert info.attributed_s == info.kernel_s == pytest.approx(2700e-6)   # nested: each kernel once
    kinds = {s.kind: s for s in built.samples}
    assert set(kinds) == {"verify", "draft", "prefill"}
    assert (kinds["verify"].batch, kinds["verify"].tokens, kinds["verify"].k) == (16, 64, 3)
    assert (kinds["draft"].batch, kinds["draft"].k) == (16, 3)
    assert kinds["prefill"].tokens == 700
    assert kinds["verify"].duration_s == pytest.approx(900e-6)


def test_tensor_parallel_ranks_merge_to_the_slowest(tmp_path: Path) -> None:
    ranges = []
    for step in range(3):
        for rank, dur in enumerate((500, 520, 510, 505)):
            t0 = step * 2000
            ranges.append(NvtxRange(f"psdsim:verify batch=8 tokens=32 ctx={step}", t0 * US, (t0 + 5) * US,
                                    pid=2000 + rank, tid=7, ops=_kernels(t0 + 10, dur, device=rank)))
    built, _ = read_nsys(_write(tmp_path / "t.sqlite", ranges), PSDSIM)
    assert len(built.samples) == 3
    assert all(s.duration_s == pytest.approx(520e-6) for s in built.samples)
    assert [s.ctx for s in built.samples] == [0, 1, 2]
    assert any("merged rank by rank" in n for n in built.notes)


def test_kernels_of_other_processes_with_equal_correlation_ids_stay_apart(tmp_path: Path) -> None:
    """Correlation ids are per process: a kernel of process B never joins a range of process A."""
    path = tmp_path / "t.sqlite"
    with NsysWriter(path) as w:
        w.add_range(NvtxRange("psdsim:draft batch=1 k=1 ctx=0", 0, 10 * US, pid=10, ops=_kernels(1, 100)))
    con = sqlite3.connect(path)
    con.execute('INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, "end", deviceId, contextId, streamId, '
                "correlationId, globalPid, demangledName, shortName) VALUES (0, 900000, 1, 1, 7, 1, ?, 1, 1)",
                (11 * 16777216,))
    con.commit()
    con.close()
    built, info = read_nsys(path, PSDSIM)
    (s,) = built.samples
    assert s.duration_s == pytest.approx(100e-6)
    assert info.attributed_s == pytest.approx(100e-6)
    assert info.kernel_s == pytest.approx(1000e-6)


def test_transfers_take_their_bytes_from_memcpys_and_start_end_ranges_count(tmp_path: Path) -> None:
    copy = GpuOp(10 * US, 30 * US, kind="memcpy", nbytes=1_000_000, name="")
    r = NvtxRange("psdsim:comm", 0, 5 * US, ops=[copy], style=START_END)
    (s,) = read_nsys(_write(tmp_path / "t.sqlite", [r]), PSDSIM)[0].samples
    assert (s.kind, s.nbytes) == ("comm", 1_000_000)
    assert s.duration_s == pytest.approx(20e-6)


def test_event_types_are_resolved_by_name(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.sqlite", [NvtxRange("psdsim:draft batch=1 k=1 ctx=0", 0, 9 * US,
                                                    ops=_kernels(1, 50))])
    con = sqlite3.connect(path)   # renumber NvtxPushPopRange: 59 -> 159 everywhere
    con.execute("UPDATE ENUM_NSYS_EVENT_TYPE SET id = 159 WHERE id = 59")
    con.execute("UPDATE NVTX_EVENTS SET eventType = 159")
    con.commit()
    con.close()
    assert len(read_nsys(path, PSDSIM)[0].samples) == 1


def test_overhead_ranges_use_cpu_time_and_phases_without_gpu_work_are_dropped(tmp_path: Path) -> None:
    ranges = [NvtxRange("psdsim:overhead", 0, 1200 * US),
              NvtxRange("psdsim:draft batch=1 k=1 ctx=0", 2000 * US, 2100 * US)]
    built, _ = read_nsys(_write(tmp_path / "t.sqlite", ranges), PSDSIM)
    (s,) = built.samples
    assert (s.kind, s.duration_s) == ("overhead", pytest.approx(1.2e-3))
    assert built.dropped["draft: range launched no GPU work"] == 1


def test_custom_rules_come_before_the_preset(tmp_path: Path) -> None:
    r = NvtxRange("my_drafter", 0, 5 * US, ops=_kernels(1, 10))
    path = _write(tmp_path / "t.sqlite", [r])
    (s,) = read_nsys(path, parse_rules("psdsim", ["draft=^my_drafter$"]))[0].samples
    assert s.kind == "draft"


# ---------------------------------------------------------------------------------------------
# Bad input: one line, TraceError


def _valid(tmp_path: Path) -> Path:
    ranges = [NvtxRange(f"psdsim:draft batch=1 k=1 ctx={i}", i * 100 * US, (i * 100 + 5) * US,
                        ops=_kernels(i * 100 + 1, 20)) for i in range(200)]
    return _write(tmp_path / "ok.sqlite", ranges)


def _one_line_error(path: Path, match: str, rules: object = PSDSIM) -> None:
    with pytest.raises(TraceError, match=match) as exc:
        read_nsys(path, rules)  # type: ignore[arg-type]
    assert "\n" not in str(exc.value)


def test_not_sqlite_empty_and_truncated_files(tmp_path: Path) -> None:
    (tmp_path / "empty.sqlite").write_bytes(b"")
    _one_line_error(tmp_path / "empty.sqlite", "empty file")
    (tmp_path / "text.sqlite").write_text("hello")
    _one_line_error(tmp_path / "text.sqlite", "not a SQLite database")
    data = _valid(tmp_path).read_bytes()
    (tmp_path / "cut.sqlite").write_bytes(data[: len(data) // 2])
    _one_line_error(tmp_path / "cut.sqlite", "corrupt or truncated|unreadable")
    garbled = bytearray(data)
    garbled[100:len(garbled) // 2] = b"\xff" * (len(garbled) // 2 - 100)
    (tmp_path / "bad.sqlite").write_bytes(bytes(garbled))
    _one_line_error(tmp_path / "bad.sqlite", "corrupt or truncated|unreadable")


def test_a_database_that_is_not_an_nsys_export(tmp_path: Path) -> None:
    con = sqlite3.connect(tmp_path / "other.sqlite")
    con.execute("CREATE TABLE people (name TEXT)")
    con.commit()
    con.close()
    _one_line_error(tmp_path / "other.sqlite", "not an Nsight Systems export")


@pytest.mark.parametrize(("table", "match"), [("NVTX_EVENTS", "no NVTX_EVENTS"),
                                              ("CUPTI_ACTIVITY_KIND_KERNEL", "no GPU kernels were traced"),
                                              ("CUPTI_ACTIVITY_KIND_RUNTIME", "no CUDA API calls")])
def test_missing_tables(tmp_path: Path, table: str, match: str) -> None:
    with NsysWriter(tmp_path / "t.sqlite", skip=(table,)):
        pass
    _one_line_error(tmp_path / "t.sqlite", match)


def test_unknown_schema_major_and_graph_mode_and_no_matching_ranges(tmp_path: Path) -> None:
    _write(tmp_path / "v4.sqlite", [], schema_version="4.0.0")
    _one_line_error(tmp_path / "v4.sqlite", "schema 4.0.0")
    with NsysWriter(tmp_path / "graph.sqlite") as w:
        w.add_range(NvtxRange("psdsim:draft batch=1 k=1 ctx=0", 0, 5 * US, ops=_kernels(1, 10)))
        w.add_graph_replay(100 * US, 900 * US)
    _one_line_error(tmp_path / "graph.sqlite", "--cuda-graph-trace=node")
    _write(tmp_path / "names.sqlite", [NvtxRange("forward", 0, 5 * US, ops=_kernels(1, 10))])
    _one_line_error(tmp_path / "names.sqlite", "no NVTX range matches.*'forward'")


def test_a_million_kernel_rows_stream_in_bounded_memory(tmp_path: Path) -> None:
    """Ranges are kept, GPU ops are not: reading 1M kernels allocates far less than holding them
    (a list of 1M row tuples alone takes over 100 MB). benchmarks/calibration_scale.py reports
    time and peak RSS."""
    import tracemalloc

    from psdsim.calibration.synthetic import write_bulk_trace

    path = tmp_path / "big.sqlite"
    write_bulk_trace(path, ranges=10_000, kernels_per_range=100, kernel_ns=10_000)
    tracemalloc.start()
    try:
        built, info = read_nsys(path, PSDSIM)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(built.samples) == 10_000
    assert all(s.duration_s == pytest.approx(1e-3) for s in built.samples)
    assert info.kernel_s == pytest.approx(10.0) and info.attributed_s == pytest.approx(10.0)
    assert peak < 40e6, f"peak Python allocation {peak / 1e6:.1f} MB"
