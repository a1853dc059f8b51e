"""MineDraft's JSONL step trace → step samples, the unit inference, and the join onto NVTX samples."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from psdsim.calibration.minedraft import read_minedraft
from psdsim.calibration.minedraft_join import join_step_attributes
from psdsim.calibration.minedraft_records import read_minedraft_requests, read_minedraft_steps
from psdsim.calibration.samples import StepSample
from psdsim.calibration.trace_error import TraceError
from tests.helpers.traces import ALL, PROMPTS, STEPS, minedraft_records, write_trace


def by_kind(samples: list[StepSample], kind: str) -> list[StepSample]:
    return [s for s in samples if s.kind == kind]


def test_samples_per_kind_and_values(tmp_path):
    built, info = read_minedraft(write_trace(tmp_path / "t.jsonl"))
    assert info.format == "minedraft" and info.version == ""
    counts = {k: len(by_kind(built.samples, k)) for k in ("prefill", "verify", "draft", "overhead")}
    assert counts == {"prefill": 2, "verify": 3, "draft": 1, "overhead": 3}
    assert len(built.samples) == 9

    verify = by_kind(built.samples, "verify")
    assert [s.duration_s for s in verify] == pytest.approx([0.030, 0.035, 0.033])
    assert [s.span_s for s in verify] == pytest.approx([0.030, 0.035, 0.033])
    # verified batch = generated − accepted; tokens = verify_len + batch; k = verify_len / batch
    assert [s.batch for s in verify] == [2, 2, 2]
    assert [s.tokens for s in verify] == [8, 8, 7]
    assert [s.k for s in verify] == pytest.approx([3.0, 3.0, 2.5])
    assert [s.accepted for s in verify] == [4, 2, 5]
    assert [s.generated for s in verify] == [6, 4, 7]
    assert verify[0].start_s == pytest.approx(0.141) and verify[0].end_s == pytest.approx(0.191)

    (draft,) = by_kind(built.samples, "draft")   # only the init step's draft is real drafting
    assert draft.duration_s == pytest.approx(0.012)
    assert (draft.batch, draft.k) == (2, 3)
    assert draft.start_s == pytest.approx(0.141)

    overhead = by_kind(built.samples, "overhead")
    assert [s.duration_s for s in overhead] == pytest.approx([0.002, 0.003, 0.002])
    assert [s.batch for s in overhead] == [4, 5, 4]

    assert built.dropped["step with nothing scheduled"] == 1
    assert sum(v for k, v in built.dropped.items() if k.startswith("draft: parallelised")) == 2
    assert all(s.source.startswith("t.jsonl:1:") for s in built.samples)
    assert built.samples == sorted(built.samples, key=lambda s: (s.start_s, s.kind))


def test_prompt_steps_become_prefill_samples(tmp_path):
    built, _ = read_minedraft(write_trace(tmp_path / "t.jsonl"))
    first, second = by_kind(built.samples, "prefill")
    assert first.duration_s == pytest.approx(0.040)
    assert first.start_s == pytest.approx(0.001) and first.end_s == pytest.approx(0.051)
    # tokens from the batched requests' prompt lengths; pairs = Σ L²/2, no context
    assert (first.batch, first.tokens, first.pairs, first.ctx) == (2, 300, (100**2 + 200**2) / 2, 0)
    # batched_token_num, where present, is the token count
    assert (second.batch, second.tokens, second.pairs, second.ctx) == (2, 700, (300**2 + 400**2) / 2, 0)
    assert math.isnan(first.k) and math.isnan(first.accepted)
    assert any("prefill samples include the draft model's prefill" in n for n in built.notes)


def test_decode_without_speculation_and_mixed_steps(tmp_path):
    steps = [STEPS[0],
             (0.06, 0.03, dict(is_prompt_run=0, batched_requests=ALL, measured_target_time=0.02)),
             (0.10, 0.05, dict(STEPS[2][2], is_prompt_run=1))]
    built, _ = read_minedraft(write_trace(tmp_path / "t.jsonl", steps=steps))
    plain, mixed = by_kind(built.samples, "verify")
    assert (plain.duration_s, plain.batch, plain.tokens, plain.k, plain.mixed) == (0.02, 4, 4, 0, False)
    assert math.isnan(plain.accepted)
    assert (mixed.batch, mixed.tokens, mixed.mixed) == (2, 8, True)
    assert len(by_kind(built.samples, "overhead")) == 1   # prompt and no-spec steps time no overhead
    assert any("1 decode steps without speculation" in n for n in built.notes)


def test_prefill_tokens_unknown_without_request_records(tmp_path):
    steps = [STEPS[0], STEPS[2]]
    path = tmp_path / "t.jsonl"
    records = [r for r in minedraft_records("s", steps) if r["type"] == "Step"]
    path.write_text(json.dumps({"metadata": {}, "traces": records}) + "\n")
    (prefill,) = by_kind(read_minedraft(path)[0].samples, "prefill")
    assert prefill.batch == 2
    assert math.isnan(prefill.tokens) and math.isnan(prefill.pairs)


@pytest.mark.parametrize("unit, name", [("s", "s"), ("ms", "ms"), ("us", "µs")])
def test_unit_is_inferred_per_file(tmp_path, unit, name):
    built, _ = read_minedraft(write_trace(tmp_path / f"{unit}.jsonl", unit=unit))
    assert [s.duration_s for s in by_kind(built.samples, "verify")] == pytest.approx([0.030, 0.035, 0.033])
    assert [s.duration_s for s in by_kind(built.samples, "prefill")] == pytest.approx([0.040, 0.050])
    assert by_kind(built.samples, "draft")[0].duration_s == pytest.approx(0.012)
    assert built.notes[0].startswith(f"measured_*_time read as {name}:")


def test_no_consistent_unit_raises(tmp_path):
    steps = [(0.0, 0.05, dict(STEPS[0][2], measured_target_time=5e9))]
    with pytest.raises(TraceError, match=r"no time unit") as err:
        read_minedraft(write_trace(tmp_path / "t.jsonl", steps=steps))
    assert "\n" not in str(err.value)


def test_bare_records_read_like_bundles(tmp_path):
    bundled, _ = read_minedraft(write_trace(tmp_path / "a.jsonl"))
    bare, _ = read_minedraft(write_trace(tmp_path / "b.jsonl", bare=True))
    assert [s.kind for s in bare.samples] == [s.kind for s in bundled.samples]
    for name in ("duration_s", "batch", "tokens", "k"):
        got, want = ([getattr(s, name) for s in x.samples] for x in (bare, bundled))
        assert got == pytest.approx(want, nan_ok=True), name


def test_request_records_are_counted_not_sampled(tmp_path):
    path = write_trace(tmp_path / "t.jsonl")
    built, _ = read_minedraft(path)
    assert any("5 request records (4 finished)" in n for n in built.notes)
    requests = read_minedraft_requests(path)
    assert [r["tid"] for r in requests] == [*PROMPTS, "Request:4"]
    assert [r.get("prompt_len") for r in requests] == [100, 200, 300, 400, None]
    steps = read_minedraft_steps(path)
    assert len(steps) == 6 and steps[0]["_prompt_lens"] == [100, 200] and steps[0]["_line"] == 1


def test_warmup_iterations_are_dropped(tmp_path):
    path = write_trace(tmp_path / "input=4_x_a_b_16_False_parallel=True_k=3_t=0_n=1_warmup=1_runs=1.jsonl",
                       bundles=2)
    built, _ = read_minedraft(path)
    assert len(by_kind(built.samples, "verify")) == 3
    assert built.dropped["step in a warm-up iteration"] == 5
    # the second iteration starts 1 s after the first
    assert by_kind(built.samples, "prefill")[0].start_s == pytest.approx(1.001)
    assert len(read_minedraft_steps(path)) == 12   # the join sees every step


def _nvtx(kind: str, n: int, t0: float = 0.0, process: int = 1, **attrs) -> list[StepSample]:
    return [StepSample(kind, t0 + i, t0 + i + 0.01, 0.01, 0.01, process=process,
                       source="nsys").with_attrs(attrs) for i in range(n)]


def test_join_fills_attributes_in_order(tmp_path):
    steps = read_minedraft_steps(write_trace(tmp_path / "t.jsonl"))
    verify = _nvtx("verify", 3)
    verify[1] = verify[1].with_attrs({"batch": 9.0})          # a present value is never overwritten
    prefill = _nvtx("draft_prefill", 2)   # `_run_no_spec` on the driver
    reject = _nvtx("reject", 3)
    draft = _nvtx("draft", 3)
    shuffled = [*reversed(verify), *prefill, *reject, *draft]  # joined in time order, returned in input order
    joined, notes = join_step_attributes(shuffled, steps)
    assert [s.start_s for s in joined] == [s.start_s for s in shuffled]

    v = sorted(by_kind(joined, "verify"), key=lambda s: s.start_s)
    assert [s.batch for s in v] == [2, 9, 2]
    assert [s.tokens for s in v] == [8, 8, 7]
    assert [s.k for s in v] == pytest.approx([3, 3, 2.5])
    assert [s.accepted for s in v] == [4, 2, 5]
    p = by_kind(joined, "draft_prefill")
    assert [(s.batch, s.tokens, s.ctx) for s in p] == [(2, 300, 0), (2, 700, 0)]
    r = by_kind(joined, "reject")
    assert [(s.batch, s.positions) for s in r] == [(2, 8), (2, 8), (2, 7)]
    # drafts: init step → sending batch then the other sub-batch; parallelised steps → other sub-batch
    d = by_kind(joined, "draft")
    assert [(s.batch, s.k) for s in d] == [(2, 3), (2, 3), (3, 3)]
    assert "verify: joined 3 samples to step records by order (3 gained attributes)" in notes
    assert any(n.startswith("draft: joined 3") and "(3 samples, 4 step phases): 1 step phases left unjoined"
               in n for n in notes)


def test_join_reports_count_mismatch(tmp_path):
    steps = read_minedraft_steps(write_trace(tmp_path / "t.jsonl"))
    joined, notes = join_step_attributes(_nvtx("verify", 5) + _nvtx("comm", 2), steps)
    v = by_kind(joined, "verify")
    assert [s.batch for s in v[:3]] == [2, 2, 2]
    assert all(math.isnan(s.batch) and math.isnan(s.tokens) for s in v[3:])
    assert any("verify: joined 3" in n and "2 samples left unjoined" in n for n in notes)
    assert any(n.startswith("comm: 2 samples; the step records say nothing") for n in notes)
    assert "draft_prefill: 2 step phases but no samples of that kind" in notes


def test_join_per_process_when_ranks_were_not_merged(tmp_path):
    steps = read_minedraft_steps(write_trace(tmp_path / "t.jsonl"))
    samples = _nvtx("verify", 3, process=1) + _nvtx("verify", 2, process=2)
    joined, notes = join_step_attributes(samples, steps)
    assert [s.tokens for s in joined] == [8, 8, 7, 8, 8]
    assert any(n.startswith("verify (process 2): joined 2") and "1 step phases left unjoined" in n
               for n in notes)


def test_join_alignment_check(tmp_path):
    steps = [(i * 0.1, 0.09, dict(STEPS[2][2], measured_target_time=0.01 + 0.002 * i)) for i in range(8)]
    recs = read_minedraft_steps(write_trace(tmp_path / "t.jsonl", steps=steps))
    samples = [StepSample("verify", i, i + 1, 0.009 + 0.002 * i, 0.01) for i in range(8)]
    _, notes = join_step_attributes(samples, recs)
    assert any("measured_target_time correlate r=1.00" in n for n in notes)


# --- bad input: one line naming the file, the problem and the fix -----------------------------


def _raises(path: Path, *needles: str) -> str:
    with pytest.raises(TraceError) as err:
        read_minedraft(path)
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg
    for needle in needles:
        assert needle in msg, msg
    return msg


def test_empty_file(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("\n  \n")
    _raises(path, "empty file")


def test_line_that_is_not_json(tmp_path):
    path = write_trace(tmp_path / "t.jsonl", bare=True)
    lines = path.read_text().splitlines()
    lines.insert(2, '{"start_us": 1, "end_us":')
    path.write_text("\n".join(lines))
    _raises(path, "line 3: not JSON (Expecting value at column")


def test_line_that_is_not_an_object(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("[1, 2]\n")
    _raises(path, "line 1: a JSON list, not an object")


def test_no_step_records(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in minedraft_records() if r["type"] == "Request"))
    _raises(path, "no step records")


@pytest.mark.parametrize("step, field", [(0, "measured_target_time"), (2, "verify_len"), (3, "accepted_num"),
                                         (0, "is_prompt_run"), (1, "end_us")])
def test_step_missing_a_required_field(tmp_path, step, field):
    path = write_trace(tmp_path / "t.jsonl", bare=True)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    del lines[5 + step][field]                       # five request records come first
    path.write_text("\n".join(json.dumps(x) for x in lines))
    _raises(path, f"line {6 + step}:", f"has no {field}")


def test_missing_field_in_a_bundle_names_the_trace(tmp_path):
    steps = [STEPS[0], (0.06, 0.05, {k: v for k, v in STEPS[2][2].items() if k != "generated_num"})]
    _raises(write_trace(tmp_path / "t.jsonl", steps=steps), "line 1 (Step:1)", "has no generated_num")


def test_negative_durations(tmp_path):
    steps = [STEPS[0], (0.06, 0.05, dict(STEPS[2][2], measured_overhead_time=-0.001))]
    _raises(write_trace(tmp_path / "a.jsonl", steps=steps), "negative duration measured_overhead_time")
    steps = [STEPS[0], (0.06, -0.01, STEPS[2][2])]
    _raises(write_trace(tmp_path / "b.jsonl", steps=steps), "line 1 (Step:1)", "negative step duration")


def test_field_that_is_not_a_number(tmp_path):
    steps = [(0.0, 0.05, dict(STEPS[0][2], measured_target_time="fast"))]
    _raises(write_trace(tmp_path / "t.jsonl", steps=steps),
            "measured_target_time is 'fast', not a finite number")


def test_missing_file(tmp_path):
    _raises(tmp_path / "nope.jsonl", "cannot read")


def test_psdsim_fields_give_every_piece_of_the_step(tmp_path):
    """psdsim's reference engine times each piece on its own: the target pass alone, drafting
    before and overlapped with it (so parallelised steps give draft samples too), the channel,
    rejection sampling; with batch and context tokens."""
    step = {"tid": "Step:1", "type": "Step", "start_us": 0, "end_us": 20_000, "is_prompt_run": 0,
            "batched_requests": ["Request:0", "Request:1", "Request:2", "Request:3"], "is_parallelised": True,
            "proposed_len": 3, "verify_len": 6, "accepted_num": 4, "generated_num": 6, "batched_token_num": 8,
            "measured_draft_time": 0.0, "measured_target_time": 0.012, "measured_overhead_time": 0.002,
            "psdsim_verify_batch": 2, "psdsim_verify_context_tokens": 300, "psdsim_target_time": 0.008,
            "psdsim_draft_sync_batch": 0, "psdsim_draft_sync_context_tokens": 0,
            "psdsim_draft_sync_time": 0.0,
            "psdsim_draft_ahead_batch": 2, "psdsim_draft_ahead_context_tokens": 280,
            "psdsim_draft_ahead_time": 0.005, "psdsim_reject_time": 0.0008, "psdsim_send_time": 0.0002,
            "psdsim_send_bytes": 900, "psdsim_return_time": 0.0003, "psdsim_return_bytes": 65_536}
    path = tmp_path / "e.jsonl"
    path.write_text(json.dumps({"metadata": {}, "traces": [step]}) + "\n")
    got = {s.kind: s for s in read_minedraft(path)[0].samples}
    assert set(got) == {"verify", "draft", "reject", "broadcast", "comm", "overhead"}
    assert (got["verify"].duration_s, got["verify"].batch, got["verify"].ctx, got["verify"].tokens) == (
        0.008, 2, 300, 8)
    d = got["draft"]
    assert (d.duration_s, d.batch, d.k, d.ctx) == (0.005, 2, 3, 280)
    assert (got["comm"].nbytes, got["broadcast"].nbytes) == (65_536, 900)
    assert got["overhead"].duration_s == pytest.approx(0.0012)
    assert got["reject"].positions == 8
