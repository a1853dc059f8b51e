"""Synthetic traces with known contents: torch.profiler (Kineto) traces, MineDraft's JSONL step
traces, and MineDraft run folders with their manifests."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

BASE_US = 5_000_000.0          # perf_counter µs of the first record


SCALE = {"s": 1.0, "ms": 1e3, "us": 1e6}


PROMPTS = {"Request:0": 100, "Request:1": 200, "Request:2": 300, "Request:3": 400}


ALL = list(PROMPTS)


# Ground truth, seconds. Each step: (start offset s, wall s, fields).
STEPS = [
    (0.000, 0.050, dict(is_prompt_run=2, batched_requests=["Request:0", "Request:1"],
                        measured_target_time=0.040)),
    (0.060, 0.070, dict(is_prompt_run=2, batched_requests=["Request:2", "Request:3"],
                        batched_token_num=700, measured_target_time=0.050)),
    # PSD init step: the sending sub-batch (2 requests) is drafted synchronously.
    (0.140, 0.050, dict(is_prompt_run=0, batched_requests=ALL, is_parallelised=False, proposed_len=3,
                        verify_len=6, accepted_num=4, generated_num=6, measured_draft_time=0.012,
                        measured_target_time=0.030, measured_overhead_time=0.002)),
    # Parallelised: the other sub-batch (3 requests: one more arrived) was drafted inside the target timer.
    (0.200, 0.045, dict(is_prompt_run=0, batched_requests=[*ALL, "Request:4"], is_parallelised=True,
                        proposed_len=3, verify_len=6, accepted_num=2, generated_num=4,
                        measured_draft_time=0.0001, measured_target_time=0.035,
                        measured_overhead_time=0.003)),
    # TETRIS trimmed the verified proposals to 5.
    (0.250, 0.044, dict(is_prompt_run=0, batched_requests=ALL, is_parallelised=True, proposed_len=3,
                        verify_len=5, accepted_num=5, generated_num=7, measured_draft_time=0.0001,
                        measured_target_time=0.033, measured_overhead_time=0.002)),
    # Nothing scheduled: only the timestamps and the dataclass default.
    (0.300, 0.001, dict(is_parallelised=False)),
]


def minedraft_records(unit: str = "s", steps=STEPS) -> list[dict]:
    out: list[dict] = []
    for i, name in enumerate(PROMPTS):
        out.append({"tid": name, "type": "Request", "start_us": BASE_US + i, "end_us": BASE_US + 400_000.0,
                    "prompt_len": PROMPTS[name], "gen_len": 20})
    out.append({"tid": "Request:4", "type": "Request", "start_us": BASE_US + 250_000.0})  # unfinished
    for i, (start, wall, fields) in enumerate(steps):
        rec = {"tid": f"Step:{i}", "type": "Step", "start_us": BASE_US + 1000 + start * 1e6,
               "end_us": BASE_US + 1000 + (start + wall) * 1e6}
        for key, value in fields.items():
            scaled = key.startswith("measured_") and isinstance(value, float)
            rec[key] = value * SCALE[unit] if scaled else value
        out.append(rec)
    return out


def write_trace(path: Path, unit: str = "s", bundles: int = 1, bare: bool = False, steps=STEPS) -> Path:
    """A MineDraft trace: one bundle per line ({"metadata", "traces"}), or one bare record a line."""
    lines = []
    for b in range(bundles):
        records = minedraft_records(unit, steps)
        for r in records:   # later iterations run later
            for key in ("start_us", "end_us"):
                if key in r:
                    r[key] += b * 1e6
        if bare:
            lines.extend(json.dumps({k: v for k, v in r.items() if k != "type"}) for r in records)
        else:
            lines.append(json.dumps({"metadata": {"k": 3}, "traces": records}))
    path.write_text("\n".join(lines) + "\n")
    return path


BASE = 6_164_379_451_776.551   # µs: real traces stamp events with a large steady clock


PID, TID = 2_718_281, 2_718_300


class KinetoTrace:
    """A torch.profiler trace under construction; times are µs after BASE."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.corr = 100_000

    def annotate(self, name: str, start: float, dur: float, pid=PID, tid=TID) -> None:
        self.events.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": pid, "tid": tid,
                            "ts": BASE + start, "dur": dur, "args": {"External id": 1, "Trace name": "x"}})
        # torch also projects each annotation onto the GPU timeline; the reader must ignore it
        self.events.append({"ph": "X", "cat": "gpu_user_annotation", "name": name, "pid": 0,
                            "tid": "stream 7", "ts": BASE + start + 1.0, "dur": dur, "args": {}})

    def launch(self, at: float, gpu_start: float, gpu_dur: float, *, pid=PID, tid=TID, cat="kernel",
               name="sm90_xmma_gemm_bf16bf16_bf16f32", device=0, stream=7, nbytes=0) -> None:
        """A CPU launch call at `at` and the GPU op it launched."""
        self.corr += 1
        api = {"kernel": "cudaLaunchKernel", "gpu_memcpy": "cudaMemcpyAsync", "gpu_memset": "cudaMemsetAsync"}
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": api[cat], "pid": pid, "tid": tid,
                            "ts": BASE + at, "dur": 2.5, "args": {"correlation": self.corr, "cbid": 211}})
        self.events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": pid, "tid": tid,
                            "ts": BASE + at - 0.5, "dur": 4.0, "args": {"External id": self.corr}})
        args = {"device": device, "stream": stream, "correlation": self.corr, "context": 1}
        if cat == "gpu_memcpy":
            args["bytes"] = nbytes
            args["memory bandwidth (GB/s)"] = 100.0
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": device, "tid": f"stream {stream}",
                            "ts": BASE + gpu_start, "dur": gpu_dur, "args": args})
        self.events.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": self.corr, "pid": pid, "tid": tid,
                            "ts": BASE + at})
        self.events.append({"ph": "f", "cat": "ac2g", "name": "ac2g", "id": self.corr, "pid": device,
                            "tid": f"stream {stream}", "ts": BASE + gpu_start, "bp": "e"})

    def document(self) -> dict:
        meta = [{"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {"name": "python"}},
                {"ph": "M", "name": "thread_name", "pid": PID, "tid": TID, "args": {"name": "thread 1"}}]
        return {"schemaVersion": 1,
                "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150_000_000_000},
                                     {"id": 1, "name": "NVIDIA H200", "totalGlobalMem": 150_000_000_000}],
                "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1},
                "traceEvents": meta + self.events,
                "traceName": "worker0.pt.trace.json", "displayTimeUnit": "ms",
                "baseTimeNanoseconds": 1_700_000_000_000_000_000}

    def write(self, path: Path, gz: bool = False, bare: bool = False) -> Path:
        data = json.dumps(self.events if bare else self.document()).encode()
        path.write_bytes(gzip.compress(data) if gz else data)
        return path


def unmatched() -> dict:
    t = KinetoTrace()
    for i in range(3):
        t.annotate(f"ProfilerStep#{i}", 100.0 * i, 50.0)
        t.annotate("my_model.forward", 100.0 * i + 1, 40.0)
        t.launch(100.0 * i + 2, 100.0 * i + 5, 5.0)
    return t.document()


K, M, ACCEPT, OUT_LEN, PROMPT = 2, 2, 1, 9, 8    # every verification accepts ACCEPT of K drafts


EXTRA = 1                                          # TETRIS drafts K + EXTRA, a full sub-batch scores K x M


VERIFIES = (OUT_LEN - 1) // (ACCEPT + 1)           # verifications per request after its prefill: 4


PREFILL_US, SD_US, PSD_INIT_US, PSD_US = 20_000, 10_000, 10_000, 8_000   # step wall times


def _steps(psd: bool, t0: float, n: int) -> tuple[list[dict], dict[str, float]]:
    """An offline iteration of n requests starting at t0 µs: one prompt step, then decode steps
    verifying sub-batch A then B (PSD) or every request (SD); returns the steps and each request's end."""
    tids = [f"Request:{i}" for i in range(n)]
    steps = [{"tid": "Step:0", "type": "Step", "start_us": t0 + 100, "end_us": t0 + 100 + PREFILL_US,
              "is_prompt_run": n, "batched_requests": tids, "is_parallelised": False,
              "measured_target_time": 0.015}]
    t, ends = t0 + 100 + PREFILL_US, {}
    batches = [tids[:M], tids[M:]] * VERIFIES if psd else [tids] * VERIFIES
    for i, verified in enumerate(batches):
        parallel = psd and i > 0
        wall = PSD_US if parallel else (PSD_INIT_US if psd else SD_US)
        running = [x for x in tids if x not in ends]
        steps.append({"tid": f"Step:{i + 1}", "type": "Step", "start_us": t, "end_us": t + wall,
                      "is_prompt_run": 0, "batched_requests": running, "is_parallelised": parallel,
                      "proposed_len": K, "verify_len": K * len(verified),
                      "accepted_num": ACCEPT * len(verified),
                      "generated_num": (ACCEPT + 1) * len(verified),
                      "measured_draft_time": 0.0001 if parallel else 0.003,
                      "measured_target_time": 0.006 if parallel else 0.005, "measured_overhead_time": 0.001})
        t += wall
        if i >= len(batches) - (2 if psd else 1):
            ends.update(dict.fromkeys(verified, t))
    return steps, ends


def write_minedraft(folder: Path, method: str, *, k: int = K, manifest: str | None = None,
                    iterations: int = 2, calibration: bool | None = None) -> Path:
    """A run folder: MineDraft's JSONL (a warm-up bundle, then `iterations` measured ones,
    named as benchmarks/benchmark_psd.py names it) and a manifest. psd+tetris is PSD whose steps
    propose k + EXTRA per request but score k per verified request (a full sub-batch's k x M);
    sd-2m is SD over 2M requests."""
    folder.mkdir(parents=True, exist_ok=True)
    psd = method in ("psd", "psd+tetris")
    tetris = method == "psd+tetris"
    n = 2 * M if method in ("psd", "psd+tetris", "sd-2m") else M
    lines = []
    for b in range(1 + iterations):
        t0 = 5e6 + b * 1e6
        steps, ends = _steps(psd, t0, n)
        for s in steps:
            if "proposed_len" in s:
                s["proposed_len"] = k + EXTRA if tetris else k
        reqs = [{"tid": tid, "type": "Request", "start_us": t0, "end_us": end, "prompt_len": PROMPT,
                 "gen_len": OUT_LEN} for tid, end in ends.items()]
        lines.append(json.dumps({"metadata": {}, "traces": steps + sorted(reqs, key=lambda r: r["tid"])}))
    name = (f"input=4_spec_bench_Qwen3-32B_Qwen3-1.7B_{M}_{tetris}_parallel={psd}_k={k}_"
            f"t={EXTRA if tetris else 0}_n=1_c=0_"
            f"warmup=1_runs={iterations}.jsonl")
    (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    table = "" if calibration is None else f"\n[validate]\ncalibration = {str(calibration).lower()}\n"
    (folder / "manifest.toml").write_text(manifest if manifest is not None else f"""
[run]
method = "{method}"
k = {K}
m = {M}
{f"extra = {EXTRA}" if tetris else ""}

[hardware]
gpu = "h100-sxm"
tensor_parallel_size = 4

[workload]
requests = {n}
output_len = {OUT_LEN}
prompt_len = {PROMPT}
{table}""", encoding="utf-8")
    return folder


def kineto_trace(tmp: Path, verify_suffix: str = "", dur: float | None = None) -> Path:
    """Twelve verify and draft ranges with kernels: a trace that calibrates."""
    t = KinetoTrace()
    now = 0.0
    for i in range(12):
        tokens, ctx = 16 * (i + 1), 1000 + 300 * i
        d = 20 + 0.5 * tokens + 0.003 * ctx
        t.annotate(f"psdsim:verify batch=8 tokens={tokens} ctx={ctx}{verify_suffix}", now, 10.0)
        t.launch(now + 1, now + 12, d if dur is None else dur)
        now += d + 50
        b, k = 1 + i % 4, 1 + i % 3
        t.annotate(f"psdsim:draft batch={b} k={k} ctx={ctx}", now, 10.0)
        t.launch(now + 1, now + 12, 10 + 2 * b * k)
        now += 10 + 2 * b * k + 50
    return t.write(tmp / "t.json")
