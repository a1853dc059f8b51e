"""The Kineto (torch.profiler Chrome trace) reader recovers known phase GPU times from synthetic traces.

Each trace is built here the way torch.profiler writes one: CPU `user_annotation` ranges, the
`cuda_runtime` launch calls made inside them, and GPU `kernel` / `gpu_memcpy` / `gpu_memset` events
tied to their calls by `args.correlation`, plus the noise a real file carries (metadata, flow
arrows, `cpu_op` events, `gpu_user_annotation` copies of the ranges). Times are µs on a large
steady-clock base, as in real captures; the expected durations are written out by hand.
"""

from __future__ import annotations

import gzip
import json

import pytest

from psdsim.calibration.kineto import read_kineto
from psdsim.calibration.ranges import PRESETS
from psdsim.calibration.trace_error import TraceError
from tests.helpers.traces import PID, KinetoTrace, unmatched

PSD, VLLM = PRESETS["psdsim"], PRESETS["vllm"]
US = 1e-6
DRAFT = "psdsim:draft batch=16 k=3 ctx=4096"
VERIFY = "psdsim:verify batch=16 tokens=64 ctx=4096"


def approx(x: float):
    return pytest.approx(x, rel=1e-9, abs=0.0)


def plain_trace() -> KinetoTrace:
    t = KinetoTrace()
    t.annotate(DRAFT, 0.0, 100.0)
    t.launch(5.0, 10.0, 20.25)
    t.launch(8.0, 40.0, 30.0)
    t.annotate(VERIFY, 200.0, 50.0)
    t.launch(205.0, 260.0, 140.5)
    t.launch(210.0, 400.5, 9.5, cat="gpu_memset", name="Memset (Device)")
    t.launch(900.0, 1000.0, 10.0)              # launched outside every range: unattributed
    return t


def check_plain(built, info, source: str) -> None:
    assert [s.kind for s in built.samples] == ["draft", "verify"]
    draft, verify = built.samples
    assert draft.duration_s == approx(50.25 * US)       # union of [10, 30.25] and [40, 70]
    assert draft.span_s == approx(60.0 * US)
    assert draft.start_s == approx(10.0 * US) and draft.end_s == approx(70.0 * US)
    assert (draft.batch, draft.k, draft.ctx) == (16.0, 3.0, 4096.0)
    assert verify.duration_s == approx(150.0 * US)      # kernel [260, 400.5] + memset [400.5, 410]
    assert verify.span_s == approx(150.0 * US)
    assert verify.start_s == approx(260.0 * US)
    assert (verify.batch, verify.tokens, verify.ctx) == (16.0, 64.0, 4096.0)
    assert draft.device == verify.device == 0
    assert draft.process == verify.process == PID
    assert draft.source == f"{source}:{DRAFT}"
    assert not built.dropped
    assert info.format == "kineto" and info.version == "1"
    assert info.gpus == {0: "NVIDIA H200", 1: "NVIDIA H200"}
    assert info.kernel_s == approx((20.25 + 30.0 + 140.5 + 10.0) * US)    # memsets are not kernels
    assert info.attributed_s == approx((20.25 + 30.0 + 140.5) * US)


def test_plain_ranges_give_gpu_busy_time(tmp_path):
    path = plain_trace().write(tmp_path / "worker0.pt.trace.json")
    built, info = read_kineto(path, PSD)
    check_plain(built, info, "worker0.pt.trace.json")


def test_gzip_is_recognised_by_its_magic_bytes(tmp_path):
    gz = plain_trace().write(tmp_path / "worker0.pt.trace.json.gz", gz=True)
    check_plain(*read_kineto(gz, PSD), "worker0.pt.trace.json.gz")
    disguised = plain_trace().write(tmp_path / "plain-name.json", gz=True)
    check_plain(*read_kineto(str(disguised), PSD), "plain-name.json")


def test_a_bare_list_of_events_is_a_trace(tmp_path):
    built, info = read_kineto(plain_trace().write(tmp_path / "bare.json", bare=True), PSD)
    assert [round(s.duration_s / US, 6) for s in built.samples] == [50.25, 150.0]
    assert info.version == "" and info.gpus == {}


def test_kernels_that_run_after_their_range_closed_belong_to_it(tmp_path):
    t = KinetoTrace()
    t.annotate(VERIFY, 0.0, 10.0)               # the CPU runs far ahead of the GPU
    t.launch(2.0, 500.0, 100.0)
    t.launch(4.0, 600.0, 100.0)
    t.launch(6.0, 750.0, 50.0)
    t.annotate(DRAFT, 10.0, 10.0)
    t.launch(10.0, 800.0, 50.0)                 # at the first range's end: the second range's call
    built, _ = read_kineto(t.write(tmp_path / "t.json"), PSD)
    verify, draft = built.samples
    assert verify.kind == "verify" and draft.kind == "draft"
    assert verify.duration_s == approx(250.0 * US)      # GPU busy time, not the 10 µs CPU range
    assert verify.span_s == approx(300.0 * US)
    assert verify.end_s == approx(800.0 * US)
    assert draft.duration_s == approx(50.0 * US) and draft.start_s == approx(800.0 * US)


def test_nanosecond_durations_survive_the_large_timestamp_base(tmp_path):
    t = KinetoTrace()
    t.annotate(DRAFT, 0.0, 10.0)
    t.launch(1.0, 20.0, 1.001)                  # ts + dur near 6e12 µs would round to ~1 ns
    t.annotate(VERIFY, 10.0, 10.0)
    t.launch(11.0, 30.0, 0.003)
    built, info = read_kineto(t.write(tmp_path / "t.json"), PSD)
    assert [s.duration_s for s in built.samples] == [approx(1.001 * US), approx(0.003 * US)]
    assert [s.span_s for s in built.samples] == [approx(1.001 * US), approx(0.003 * US)]
    assert info.kernel_s == approx(1.004 * US)

def test_overlapping_kernels_on_two_streams_count_once(tmp_path):
    t = KinetoTrace()
    t.annotate(VERIFY, 0.0, 50.0)
    t.launch(1.0, 100.0, 100.0, stream=7)
    t.launch(2.0, 150.0, 110.0, stream=8)
    t.launch(3.0, 300.0, 20.0, stream=7)
    t.launch(4.0, 305.0, 5.0, stream=8)
    built, info = read_kineto(t.write(tmp_path / "t.json"), PSD)
    (verify,) = built.samples
    assert verify.duration_s == approx(180.0 * US)      # [100, 260] ∪ [300, 320]; the sum would be 235
    assert verify.span_s == approx(220.0 * US)
    assert info.attributed_s == approx(235.0 * US)


def test_vllm_phases_inherit_the_step_ranges_batch(tmp_path):
    t = KinetoTrace()
    t.annotate("execute_context_0(0)_generation_16(64)", 0.0, 500.0)
    t.launch(10.0, 50.0, 10.0)                          # preprocessing: the step's, no phase's
    t.annotate("gpu_model_runner: forward", 100.0, 300.0)
    t.launch(110.0, 120.0, 180.0)
    t.launch(200.0, 300.0, 50.0)
    t.annotate("gpu_model_runner: sample", 510.0, 50.0)     # vLLM V1 samples and drafts after the
    t.launch(520.0, 560.0, 15.0)                            # step range has closed
    t.annotate("gpu_model_runner: draft", 560.0, 140.0)
    t.launch(570.0, 580.0, 20.0)
    t.launch(575.0, 600.0, 40.0)
    t.annotate("execute_context_0(0)_generation_8(16)", 1000.0, 400.0)
    t.annotate("gpu_model_runner: forward", 1100.0, 100.0)
    t.launch(1110.0, 1200.0, 70.0)
    built, info = read_kineto(t.write(tmp_path / "t.json"), VLLM)
    got = [(s.kind, round(s.duration_s / US, 6), s.batch, s.tokens, s.k) for s in built.samples]
    assert got == [("verify", 230.0, 16.0, 64.0, 3.0),
                   ("reject", 15.0, 16.0, 64.0, 3.0),
                   ("draft", 60.0, 16.0, 64.0, 3.0),
                   ("verify", 70.0, 8.0, 16.0, 1.0)]
    assert built.samples[1].positions == 64.0
    assert not any(s.mixed for s in built.samples)
    # a kernel inside nested ranges counts once: all 385 us of kernels were launched in some range
    assert info.attributed_s == approx(385.0 * US)
    assert info.kernel_s == approx(385.0 * US)


def test_ranks_in_separate_processes_merge_rank_by_rank(tmp_path):
    t = KinetoTrace()
    times = {4001: (100.0, 40.0), 4002: (80.0, 90.0)}    # each rank's kernel time in steps 1 and 2
    for rank, (pid, durs) in enumerate(times.items()):
        for step, dur in enumerate(durs):
            at = 1000.0 * step + rank
            t.annotate("psdsim:verify batch=8 tokens=32 ctx=100", at, 20.0, pid=pid, tid=7)
            t.launch(at + 5.0, at + 50.0, dur, pid=pid, tid=7, device=rank)
    built, _ = read_kineto(t.write(tmp_path / "t.json"), PSD)
    assert [(s.kind, round(s.duration_s / US, 6), s.process) for s in built.samples] == [
        ("verify", 100.0, 4001), ("verify", 90.0, 4002)]      # the slowest rank's time, step by step
    assert all((s.batch, s.tokens, s.ctx, s.device) == (8.0, 32.0, 100.0, 0) for s in built.samples)
    assert built.samples[1].start_s == approx(1050.0 * US)    # the earliest rank's start
    assert any("merged rank by rank" in n for n in built.notes)


def test_the_same_tid_in_two_processes_is_two_threads(tmp_path):
    t = KinetoTrace()
    t.annotate("psdsim:step k=3", 0.0, 5.0, pid=11, tid=7)
    t.annotate("psdsim:step k=1", 1.0, 5.0, pid="12", tid="7")
    t.annotate("psdsim:verify batch=4", 10.0, 5.0, pid=11, tid=7)
    t.launch(11.0, 20.0, 3.0, pid=11, tid=7)
    for at in (12.0, 30.0):
        t.annotate("psdsim:verify batch=4", at, 5.0, pid="12", tid="7")
        t.launch(at + 1.0, at + 10.0, 4.0, pid="12", tid="7")
    built, _ = read_kineto(t.write(tmp_path / "t.json"), PSD)
    got = sorted((s.process, s.k, round(s.duration_s / US, 6)) for s in built.samples)
    assert got == [(11, 3.0, 3.0), (12, 1.0, 4.0), (12, 1.0, 4.0)]    # unequal counts: kept unmerged
    assert any("disagree" in n for n in built.notes)


def test_transfers_take_their_bytes_from_memcpys(tmp_path):
    t = KinetoTrace()
    t.annotate("psdsim:comm", 0.0, 10.0)
    t.launch(1.0, 10.0, 10.0, cat="gpu_memcpy", name="Memcpy PtoP (Device -> Device)", nbytes=1000)
    t.launch(2.0, 20.0, 5.0, name="ncclDevKernel_AllReduce_Sum_bf16_RING_LL")
    t.launch(3.0, 25.0, 15.0, cat="gpu_memcpy", name="Memcpy DtoH (Device -> Pinned)", nbytes=3000)
    t.annotate("psdsim:comm bytes=512", 100.0, 10.0)      # a size in the name wins
    t.launch(101.0, 110.0, 2.0, cat="gpu_memcpy", name="Memcpy HtoD (Pinned -> Device)", nbytes=4096)
    built, info = read_kineto(t.write(tmp_path / "t.json"), PSD)
    first, second = built.samples
    assert (first.kind, first.nbytes) == ("comm", 4000.0)
    assert first.duration_s == approx(30.0 * US) and first.span_s == approx(30.0 * US)
    assert (second.kind, second.nbytes) == ("comm", 512.0)
    assert info.kernel_s == approx(5.0 * US)


def test_ranges_without_gpu_work_are_dropped(tmp_path):
    t = KinetoTrace()
    t.annotate(DRAFT, 0.0, 10.0)                        # launches nothing
    t.annotate(DRAFT, 20.0, 10.0)
    t.launch(21.0, 40.0, 5.0)
    t.annotate("psdsim:overhead", 50.0, 12.5)            # overhead is CPU time: kept without GPU work
    t.annotate("aten::linear", 60.0, 1.0)                # no rule matches: ignored
    built, _ = read_kineto(t.write(tmp_path / "t.json"), PSD)
    got = [(s.kind, round(s.duration_s / US, 6)) for s in built.samples]
    assert got == [("draft", 5.0), ("overhead", 12.5)]
    assert built.dropped == {"draft: range launched no GPU work": 1}


def test_many_steps_each_get_their_own_kernels(tmp_path):
    t = KinetoTrace()
    steps = 400
    for i in range(steps):
        at = 100.0 * i
        t.annotate(DRAFT, at, 10.0)
        t.launch(at + 1.0, at + 30.0, 1.0 + i % 7)
        t.annotate(VERIFY, at + 10.0, 10.0)
        t.launch(at + 11.0, at + 45.0, 2.0 + i % 5)
        t.launch(at + 12.0, at + 47.5, 2.0)
    built, _ = read_kineto(t.write(tmp_path / "t.json"), PSD)
    drafts = [s.duration_s / US for s in built.samples if s.kind == "draft"]
    verifies = [s.duration_s / US for s in built.samples if s.kind == "verify"]
    assert drafts == pytest.approx([1.0 + i % 7 for i in range(steps)], rel=1e-9)
    union = (4.0, 4.5, 4.5, 5.0, 6.0)    # [45, 47 + i % 5] ∪ [47.5, 49.5]
    assert verifies == pytest.approx([union[i % 5] for i in range(steps)], rel=1e-9)


def no_kernels() -> dict:
    t = KinetoTrace()
    t.annotate(DRAFT, 0.0, 10.0)
    t.launch(1.0, 20.0, 5.0)
    doc = t.document()
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "kernel"]
    return doc


def no_annotations() -> dict:
    t = KinetoTrace()
    t.launch(1.0, 20.0, 5.0)
    return t.document()


VALID = json.dumps(plain_trace().document()).encode()
BAD = {
    "empty": (b"", "empty file"),
    "empty-gzip": (gzip.compress(b""), "empty file"),
    "not-json": (b"Nsight Systems report", "not JSON"),
    "binary": (b"\x00\x01\x02\xff\xfe", "not JSON"),
    "truncated": (VALID[: len(VALID) // 2], "truncated JSON"),
    "corrupt-gzip": (b"\x1f\x8b" + b"not really gzip" * 4, "gzip"),
    "truncated-gzip": (gzip.compress(VALID)[:200], "gzip"),
    "other-json": (b'{"model": "llama", "steps": [1, 2]}', "not a Kineto trace (no traceEvents list)"),
    "json-number": (b"42", "not a Kineto trace"),
    "events-not-a-list": (b'{"traceEvents": {"a": 1}}', "not a Kineto trace"),
    "no-events": (b'{"schemaVersion": 1, "traceEvents": []}', "no events"),
    "no-kernels": (json.dumps(no_kernels()).encode(), "ProfilerActivity.CUDA"),
    "unmatched": (json.dumps(unmatched()).encode(), "'ProfilerStep#0'"),
    "no-annotations": (json.dumps(no_annotations()).encode(), "no user_annotation (record_function) ranges"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_line_naming_the_file(tmp_path, case):
    data, expected = BAD[case]
    path = tmp_path / f"{case}.pt.trace.json"
    path.write_bytes(data)
    with pytest.raises(TraceError) as err:
        read_kineto(path, PSD)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: ")
    assert expected in message


def test_unmatched_names_are_listed_most_common_first(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps(unmatched()))
    names = r"most common names: 'my_model\.forward', 'ProfilerStep#0'.*--ranges"
    with pytest.raises(TraceError, match=names):
        read_kineto(path, PSD)


def test_missing_file(tmp_path):
    with pytest.raises(TraceError, match="cannot read"):
        read_kineto(tmp_path / "absent.pt.trace.json", PSD)
