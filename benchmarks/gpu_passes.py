"""Real decoder passes against the execution model's prediction for the same implementation.

What it checks: sim/execution.py prices a forward pass as the roofline of its bytes and FLOPs plus a
fixed GPU time per kernel (CUDA graph), and, in eager mode, against the CPU's launch of every
kernel. Here the implementation is plain, unfused PyTorch (a Qwen3-shaped decoder: q/k RMSNorm,
rotary embedding, KV-cache writes, SDPA with the KV groups folded into the query length, SwiGLU,
the LM head over every scored position: docs/measurements/h200_step_bench.py, the script that
recorded docs/measurements/h200_passes.jsonl), whose kernels per layer, elementwise kernels' bytes
and attention pairs are counted below from its code, so the prediction is for exactly what runs
(the execution model adds those bytes to the roofline and prices the attention kernel apart at
ATTENTION_EFFICIENCY: no fused engine's profile sets either).

    python benchmarks/gpu_passes.py              # CUDA GPU: time the passes now, then compare
    python benchmarks/gpu_passes.py --recorded   # no GPU needed: docs/measurements/h200_passes.jsonl
    python benchmarks/gpu_passes.py --out f.jsonl  # also write the measured rows

Constants: the fixed GPU time per kernel is the elementwise floor plus the per-kernel gap
(docs/reference/engine_overheads.md rows 4.6 and 2.4: 1.5 + 1.34 us), bandwidth and FLOP
efficiencies the scenario defaults (0.81, 0.77). The eager CPU cost per launch depends on the host
running the benchmark; no public figure exists for that machine, so it is measured on one model's
rows (`--launch-from`, default qwen3-0.6b: eager time / kernels, median), which are then left out
of the eager error statistics.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from psdsim.sim.catalog import EngineProfile, builtin_catalog
from psdsim.sim.execution import PassModel

RECORDED = Path(__file__).resolve().parent.parent / "docs" / "measurements" / "h200_passes.jsonl"
MEM_EFF, COMPUTE_EFF = 0.81, 0.77        # the scenario defaults (sim/scenario_fields.py [costs])
KERNEL_US = 1.5 + 1.34                    # rows 4.6 (elementwise floor) and 2.4 (per-kernel gap)
GRAPH_BOUND, EAGER_BOUND = 0.15, 0.25     # the targets


def kernels_per_layer(q: int) -> int:
    """Kernels one layer of h200_step_bench.Decoder.forward launches (PyTorch >= 2.8 has a fused
    RMSNorm kernel): RMSNorm 1, QKV GEMM 1, q and k RMSNorm on strided views 2 each (copy and
    norm), rotary 7 each (2 cats of cos/sin, mul, neg, cat, mul, add), 2 KV-cache writes,
    attention 1, O GEMM 1, residual add 1, RMSNorm 1, gate_up GEMM 1, SiLU 1, mul 1, down GEMM 1,
    add 1 = 31. With q > 1: the boolean mask becomes an additive one (2), and the rotated q and
    the attention output are re-laid out before their reshapes (2) = 35."""
    return 31 if q == 1 else 35


def elementwise_vectors(q: int) -> dict[str, float]:
    """Vectors each token's elementwise kernels read and write per layer of Decoder.forward, by
    width (the GEMMs' and the attention kernel's own operands are the roofline's):
    hidden: RMSNorm 2 (read, write), residual add 3 (two reads, a write), twice = 10;
    query heads: the strided q's RMSNorm 4 (copy, norm), rotary 10 (mul 2, neg of one half 1,
    cat 2, mul 2, add 3); with q > 1 the re-layouts of the rotated q and of the attention output
    2 each = 14, 18;  KV heads: k's RMSNorm 4 and rotary 10, the K and V cache writes 2 each = 18;
    MLP: SiLU of the gate half 2, the product 3 = 5. Left out, per position rather than per
    token: the cos/sin cats (up to 4 head_dim vectors); per layer: the boolean mask's conversion
    (its re-reads across heads are assumed served by the L2 cache)."""
    return {"elementwise_hidden": 10, "elementwise_heads": 14 if q == 1 else 18,
            "elementwise_kv_heads": 18, "elementwise_mlp": 5}


# The attention kernel: SDPA's flash backend takes no attn_mask, so with the bench's boolean mask
# (q > 1) another backend runs, and without one (q = 1) PyTorch's FlashAttention-2; neither is the
# Hopper-native FlashAttention-3. FlashAttention-2 reaches 35% of an H100's peak (Shah et al. 2024,
# arXiv:2407.08608, abstract), the best of the pre-Hopper kernels: this efficiency is its upper bound.
ATTENTION_EFFICIENCY = 0.35


def implementation(q: int, launch_us: float) -> EngineProfile:
    """The measured implementation as an execution profile (no sampler: the pass ends at logits)."""
    return EngineProfile(key="pytorch-unfused", name="plain PyTorch decoder, unfused", kind="execution",
                         source="benchmarks/gpu_passes.py", kernels_per_layer=kernels_per_layer(q),
                         kernels_per_pass=2, kernel_us=KERNEL_US, launch_us=launch_us,
                         attention_efficiency=ATTENTION_EFFICIENCY, **elementwise_vectors(q))


def attention_pairs(row: dict) -> float:
    """(query, key) pairs the pass's attention computes: every one of its B x q queries against all
    ctx + q keys. A kernel skips the masked half of a causal block only when told it is causal
    (is_causal); handed an explicit mask, as the bench does, it computes every score."""
    return row["B"] * row["q"] * (row["ctx"] + row["q"])


def predict(row: dict, launch_us: float, graphs: bool) -> float:
    """Predicted milliseconds of one pass described by a measured row."""
    cat = builtin_catalog()
    model, gpu = cat.models[row["model"]], cat.gpus[row.get("gpu", "h200")]
    engine = implementation(row["q"], launch_us)
    if graphs:
        engine = EngineProfile(**{**engine.__dict__, "cuda_graphs": True, "graph_launch_us": 0.0})
    pm = PassModel(model, gpu, 1, cat.links["nvlink4"], engine, MEM_EFF, COMPUTE_EFF)
    b, q, ctx = row["B"], row["q"], row["ctx"]
    tokens = b * q
    gpu_s = pm.gpu(tokens, tokens, b * ctx, attention_pairs(row))
    return pm.combine(pm.cpu(0), gpu_s) * 1e3


def launch_from(rows: list[dict], model: str) -> float:
    """Host seconds per kernel on the measuring machine (us): the eager rows of `model`, each
    eager time over its kernels, median (those rows are CPU-bound: eager >> graph)."""
    cat = builtin_catalog()
    per = [r["eager_ms"] * 1e3 / (cat.models[model].layers * kernels_per_layer(r["q"]) + 2)
           for r in rows if r["model"] == model and "eager_ms" in r]
    if not per:
        sys.exit(f"gpu_passes: no eager rows of {model} to measure the launch cost on")
    return statistics.median(per)


def table(rows: list[dict], launch_model: str) -> None:
    launch_us = launch_from(rows, launch_model)
    print(f"eager launch cost {launch_us:.1f} us per kernel (median over {launch_model}'s rows, "
          f"left out of the eager statistics); kernel fixed time {KERNEL_US:.2f} us\n")
    print(f"{'model':11} {'role':7} {'B':>3} {'q':>3} {'ctx':>5} {'kern/L':>6} | {'graph':>6} {'pred':>6} "
          f"{'err':>6} | {'eager':>6} {'pred':>6} {'err':>6}")
    errs: dict[str, list[float]] = {"graph": [], "eager": []}
    for r in rows:
        if "error" in r or "model" not in r:
            continue
        cells = []
        for kind, graphs in (("graph", True), ("eager", False)):
            measured = r.get(f"{kind}_ms")
            if measured is None:
                cells.append(f"{'-':>6} {'-':>6} {'-':>6}")
                continue
            pred = predict(r, launch_us, graphs)
            err = pred / measured - 1
            if not (kind == "eager" and r["model"] == launch_model):
                errs[kind].append(err)
            cells.append(f"{measured:6.1f} {pred:6.1f} {err:+6.0%}")
        print(f"{r['model']:11} {r['role']:7} {r['B']:3d} {r['q']:3d} {r['ctx']:5d} "
              f"{kernels_per_layer(r['q']):6d} | " + " | ".join(cells))
    print()
    for kind, bound in (("graph", GRAPH_BOUND), ("eager", EAGER_BOUND)):
        e = errs[kind]
        if not e:
            continue
        within = sum(abs(x) <= bound for x in e)
        print(f"{kind:5}: {len(e)} rows, median |error| {statistics.median(abs(x) for x in e):.0%}, "
              f"median error {statistics.median(e):+.0%}, within ±{bound:.0%}: {within}/{len(e)}")


def read_rows(path: Path) -> tuple[dict, list[dict]]:
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return lines[0], lines[1:]


# -- timing on a GPU: the recorded file's own script, so the implementation is the same ---------

BENCH = Path(__file__).resolve().parent.parent / "docs" / "measurements" / "h200_step_bench.py"
SHAPES = ("qwen3-32b", "qwen3-8b", "qwen3-1.7b", "qwen3-0.6b")
PLAN = (("qwen3-32b", "verify", (1, 8, 32), (1, 4), (1024,)),
        ("qwen3-8b", "verify", (1, 8, 32), (1, 4), (1024,)),
        ("qwen3-1.7b", "draft", (1, 16, 64), (1,), (512, 2048)),
        ("qwen3-0.6b", "draft", (1, 16, 32), (1,), (1024,)))


def measure(reps: int) -> tuple[dict, list[dict]]:
    """Time PLAN's passes with docs/measurements/h200_step_bench.py's decoder (eager and graph)."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("h200_step_bench", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    rows = []
    for name, role, bs, qs, ctxs in PLAN:
        net = bench.Decoder(bench.SHAPES[name], max(bs), max(ctxs) + 8, "cuda", torch.bfloat16)
        for ctx in ctxs:
            for b in bs:
                for q in qs:
                    row = {"model": name, "role": role, "B": b, "q": q, "ctx": ctx,
                           **bench.time_shape(net, b, q, ctx, reps, True, torch.cuda.synchronize)}
                    print(json.dumps(row), flush=True)
                    rows.append(row)
        del net
        torch.cuda.empty_cache()
    return {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "date": time.strftime("%Y-%m-%d")}, rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recorded", action="store_true", help="use the recorded H200 passes, no GPU")
    ap.add_argument("--file", type=Path, default=RECORDED, help="recorded passes (JSON lines)")
    ap.add_argument("--out", type=Path, help="write the measured rows here (GPU runs)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--launch-from", default="qwen3-0.6b", choices=SHAPES,
                    help="model whose eager rows measure the host's launch cost")
    args = ap.parse_args()
    gpu = False
    if not args.recorded:
        try:
            import torch
            gpu = torch.cuda.is_available()
        except ImportError:
            gpu = False
    if gpu:
        head, rows = measure(args.reps)
        if args.out:
            args.out.write_text("".join(json.dumps(r) + "\n" for r in [head, *rows]), encoding="utf-8")
    else:
        head, rows = read_rows(args.file)
        print(f"no CUDA GPU here (or --recorded): the recorded passes in {args.file.name}")
    print(f"device {head.get('device')}, torch {head.get('torch')}" +
          (f", {head['date']}" if "date" in head else ""))
    table(rows, args.launch_from)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
