"""Where the adaptive mode (`method = "adaptive"`: PSD, SD or AR step by step) pays, and where not.

Part 1, the same requests under each method (seed 1, 300 requests, Qwen3-32B on 4 x L40S with
Qwen3-1.7B drafting across PCIe unless the row says otherwise, k = 3, m = 16): output tokens/s over
the makespan of ar, sd, sd-2m, psd and adaptive, adaptive's gain over psd, the p50 TPOT of both,
and the share of adaptive's steps in each mode with its switches; across acceptance, load (Poisson
rate), m, the GPU and link, and a target small enough for AR to win.
Part 2, `psdsim plan examples/adaptive_plan.toml` at the catalog's acceptance and at 0.3: the
largest request rate each configuration sustains under the plan's objectives.
Part 3, adjusting m (`adaptive_m = true`): the same requests under psd and adaptive at the row's m,
adaptive with adaptive_m, and psd at m = 64, from a load below 2m to a queue that never empties;
output tokens/s, p50 TPOT, p99 queueing, and the m adaptive_m ran (its range and the m most steps
ran), with its preemptions against adaptive's.

    python benchmarks/adaptive_mode.py [--record] [--no-plan]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from recording import ROOT, Lines, add_record_flag, write

from psdsim.sim.run import simulate
from psdsim.sim.scenario import load_scenario

METHODS = ("ar", "sd", "sd-2m", "psd", "adaptive")
H100 = ["gpu=h100-sxm", "link=nvlink4"]
SMALL_TARGET = ["target=qwen3-8b", "draft=qwen3-0.6b", "tensor_parallel_size=1", "m=64"]
ROWS = [
    ("offline, acceptance 0.2", ["acceptance=0.2"]),
    ("offline, acceptance 0.35", ["acceptance=0.35"]),
    ("offline (catalog acceptance 0.61)", []),
    ("offline, acceptance 0.8", ["acceptance=0.8"]),
    ("1 req/s", ["rate=1"]),
    ("2 req/s", ["rate=2"]),
    ("4 req/s", ["rate=4"]),
    ("4 req/s, acceptance 0.35", ["rate=4", "acceptance=0.35"]),
    ("offline, m = 4", ["m=4"]),
    ("offline, m = 64", ["m=64"]),
    ("offline, compact sampler output", ["sampler_output=compact"]),
    ("H100 + NVLink, offline", H100),
    ("H100 + NVLink, 1 req/s", [*H100, "rate=1"]),
    ("H100 + NVLink, 4 req/s", [*H100, "rate=4"]),
    ("H100 + NVLink, offline, acceptance 0.35", [*H100, "acceptance=0.35"]),
    ("Qwen3-8B/0.6B on 1 L40S, m = 64, offline", SMALL_TARGET),
]


M_ROWS = [
    ("0.5 req/s (below 2m)", ["rate=0.5"]),
    ("1 req/s", ["rate=1"]),
    ("2 req/s", ["rate=2"]),
    ("4 req/s", ["rate=4"]),
    ("8 req/s", ["rate=8"]),
    ("offline", []),
    ("offline, m = 4", ["m=4"]),
    ("offline, acceptance 0.35", ["acceptance=0.35"]),
    ("H100 + NVLink, 4 req/s", [*H100, "rate=4"]),
    ("H100 + NVLink, offline", H100),
    ("Qwen3-8B/0.6B on 1 L40S, m = 64, offline", SMALL_TARGET),
    ("offline, gpu_memory_utilization 0.45", ["gpu_memory_utilization=0.45"]),
]
M_RUNS = (("psd", ["method=psd"]), ("adaptive", ["method=adaptive"]),
          ("+adaptive_m", ["method=adaptive", "adaptive_m=true"]), ("psd m=64", ["method=psd", "m=64"]))


def m_row(out: Lines, label: str, fields: list[str]) -> None:
    """One Part 3 row: each of M_RUNS on the same requests (see the module docstring)."""
    results = {name: simulate(load_scenario(overrides=["requests=300", "seed=1", *fields, *extra]))
               for name, extra in M_RUNS}
    cells = "".join(f"{results[n].summary['output_tok_s']:>12.1f}" for n, _ in M_RUNS)
    tpot = "".join(f"{results[n].summary['tpot_ms']['p50']:>7.1f}" for n, _ in M_RUNS[1:3])
    queue = "".join(f"{results[n].summary['queue_ms']['p99'] / 1e3:>7.1f}" for n, _ in M_RUNS[1:3])
    ms = results["+adaptive_m"].steps["m"].astype(int)
    values, counts = np.unique(ms, return_counts=True)
    ran = f"{ms.min()}-{ms.max()} ({values[counts.argmax()]})"
    gain = results["+adaptive_m"].summary["output_tok_s"] / results["adaptive"].summary["output_tok_s"] - 1
    preempted = "".join(f"{int(results[n].steps['preempted'].sum()):>6}" for n, _ in M_RUNS[1:3])
    out(f"{label:<42}{cells}{100 * gain:>+7.1f}%{tpot}{queue}{ran:>14}{preempted}")


def compare_row(out: Lines, label: str, fields: list[str]) -> None:
    summaries, steps = {}, None
    for method in METHODS:
        r = simulate(load_scenario(overrides=["requests=300", "seed=1", *fields, f"method={method}"]))
        summaries[method] = r.summary
        if method == "adaptive":
            steps = r.steps
    assert steps is not None
    rates = "".join(f"{summaries[m]['output_tok_s']:>8.1f}" for m in METHODS)
    gain = summaries["adaptive"]["output_tok_s"] / summaries["psd"]["output_tok_s"] - 1
    tpot = f"{summaries['psd']['tpot_ms']['p50']:>6.1f}{summaries['adaptive']['tpot_ms']['p50']:>6.1f}"
    shares = "".join(f"{100 * (steps['mode'] == m).mean():>5.0f}" for m in ("psd", "sd", "ar"))
    out(f"{label:<42}{rates}{100 * gain:>+7.1f}%{tpot}{shares}{int(steps['switch'].sum()):>5}")


def plan_rows(out: Lines, overrides: list[str]) -> None:
    """The plan's largest sustainable rate per configuration, the methods side by side."""
    from psdsim.studies.plan import load_plan
    from psdsim.studies.plan_verdict import run_plan

    result = run_plan(load_plan(ROOT / "examples" / "adaptive_plan.toml", overrides), workers=2)
    rate = {(s.method, s.link, s.k, s.m): r["max_rate_req_s"] for s, r in zip(result.configs, result.rows,
                                                                               strict=True)}
    for link in ("pcie4", "nvlink4"):
        for k in (2, 4):
            for m in (8, 32):
                ar = next(v for (meth, _, _, mm), v in rate.items() if meth == "ar" and mm == m)
                cells = [ar] + [rate[(meth, link, k, m)] for meth in ("sd", "psd", "adaptive")]
                gain = cells[3] / cells[2] - 1 if cells[2] and cells[3] else float("nan")
                shown = "".join(f"{c:>9.3g}" if c else f"{'-':>9}" for c in cells)
                out(f"  {link:<8} k={k} m={m:<3}{shown}{100 * gain:>+9.1f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_record_flag(parser)
    parser.add_argument("--no-plan", action="store_true", help="part 1 only")
    args = parser.parse_args()
    out = Lines()
    out("Part 1: output tok/s (makespan) per method; adaptive over psd; p50 TPOT ms (psd, adaptive); "
        "adaptive's steps per mode (%) and switches")
    out(f"{'workload':<42}" + "".join(f"{m:>8}" for m in METHODS) + f"{'gain':>8}{'TPOT':>12}"
        + "".join(f"{m:>5}" for m in ("psd", "sd", "ar")) + f"{'sw':>5}")
    for label, fields in ROWS:
        compare_row(out, label, fields)
    if not args.no_plan:
        plans = (("the catalog's acceptance (0.61)", []), ("acceptance 0.3", ["acceptance=0.3"]))
        for title, overrides in plans:
            out("")
            out(f"Part 2: psdsim plan examples/adaptive_plan.toml, {title}: largest sustainable req/s")
            out(f"  {'configuration':<16}{'ar':>9}{'sd':>9}{'psd':>9}{'adaptive':>9}{'ad./psd':>10}")
            plan_rows(out, overrides)
    out("")
    out("Part 3: adaptive_m; output tok/s (makespan) of psd and adaptive at the row's m, adaptive with "
        "adaptive_m, psd at m = 64; +adaptive_m over adaptive; p50 TPOT ms and p99 queueing s (adaptive, "
        "+adaptive_m); the m adaptive_m ran: its range (the m most steps ran); preemptions (adaptive, "
        "+adaptive_m)")
    out(f"{'workload':<42}" + "".join(f"{n:>12}" for n, _ in M_RUNS) + f"{'gain':>8}{'TPOT':>14}"
        + f"{'queue':>14}{'m':>14}{'preempt':>12}")
    for label, fields in M_ROWS:
        m_row(out, label, fields)
    if args.record:
        notes = ("Part 1: seed 1, 300 requests; default models and GPUs (Qwen3-32B on 4 x L40S, Qwen3-1.7B "
                 "drafting across PCIe), k = 3, m = 16, unless the row says otherwise; output tok/s is all "
                 "output tokens over the makespan (offline rows: capacity; rows with a rate: what the "
                 "arrivals allow). Part 2: the plan's objectives (p99 latency 60 s, TTFT 5 s, queueing "
                 "10 s) on H100s, 200 requests per run, rates within 5%; ar runs on 4 GPUs, the others on 5 "
                 "but sd (4). Part 3: as Part 1, m = 16 unless the row says otherwise; adaptive_m with its "
                 "default bounds (1 to no bound of its own) and margin (0.05).")
        path = write("adaptive_mode", "The adaptive mode against PSD, SD and AR", out, notes)
        print(f"recorded: {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path}")


if __name__ == "__main__":
    main()
