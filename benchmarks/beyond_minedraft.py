"""Beyond MineDraft in `psdsim plan`: the adaptive mode, tail pre-drafting and the KV balance.

Runs `psdsim plan examples/beyond_plan.toml` at the catalog's acceptance and at 0.3 and lays the
largest sustainable rate of each design beside SD's and PSD's, per (link, k, m), with each
design's rate per GPU over SD's (the plan's verdict: above 1 the extra GPU pays).
docs/studies.md ("Beyond MineDraft") reads it.

    python benchmarks/beyond_minedraft.py [--record]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from recording import Lines, add_record_flag, write

from psdsim.studies.plan import load_plan
from psdsim.studies.plan_verdict import run_plan

PLAN = Path(__file__).resolve().parents[1] / "examples" / "beyond_plan.toml"
# (method, tail, balance_by) of each column after SD's
DESIGNS = {"psd": ("psd", "sd", "requests"), "psd pearl-tail": ("psd", "pre-draft-pearl", "requests"),
           "psd kv": ("psd", "sd", "kv"), "adaptive": ("adaptive", "sd", "requests"),
           "adaptive kv": ("adaptive", "sd", "kv")}


def table(out: Lines, overrides: list[str], label: str) -> None:
    result = run_plan(load_plan(PLAN, overrides), workers=2)
    rows: dict[tuple[Any, ...], dict[str, Any]] = {
        (r["method"], r["tail"], r["balance_by"], r["link"], r["k"], r["m"]): r for r in result.rows}
    out(f"{label}: largest sustainable req/s; in brackets its rate per GPU over SD's")
    out(f"  {'configuration':<20}{'sd':>7}" + "".join(f"{name:>17}" for name in DESIGNS))
    space = result.spec.space
    for link in space["link"]:
        for k in space["k"]:
            for m in space["m"]:
                sd = rows[("sd", "sd", "requests", link, k, m)]
                cells = []
                for design in DESIGNS.values():
                    r = rows.get((*design, link, k, m))
                    per_gpu, sd_per_gpu = (r or {}).get("rate_req_s_per_gpu"), sd["rate_req_s_per_gpu"]
                    cells.append(f"{r['max_rate_req_s']:.3g} ({per_gpu / sd_per_gpu:.2f}x)"
                                 if r and per_gpu and sd_per_gpu else "-")
                out(f"  {link:<8} k={k} m={m:<4}{sd['max_rate_req_s'] or 0:>7.3g}"
                    + "".join(f"{c:>17}" for c in cells))
    out(f"  skipped as invalid: {len(result.invalid)} (sd with a pre-drafted tail or KV balance; "
        "adaptive with a pre-drafted tail)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_record_flag(parser)
    args = parser.parse_args()
    out = Lines()
    table(out, [], "psdsim plan examples/beyond_plan.toml (the catalog's acceptance, 0.61)")
    out("")
    table(out, ["acceptance=0.3"], "psdsim plan examples/beyond_plan.toml --set acceptance=0.3")
    if args.record:
        notes = ("Qwen3-32B at TP=4 on H100s, Qwen3-1.7B drafting across PCIe or NVLink, ShareGPT, 100 "
                 "requests of 128 output tokens per run; p99 latency 60 s, TTFT 5 s, queueing 10 s (the "
                 "default); rates within 5%. sd runs on 4 GPUs, the others on 5. Analytic cost model: "
                 "approximate.")
        print(f"recorded: {write('beyond_minedraft', 'Beyond MineDraft in psdsim plan', out, notes)}")


if __name__ == "__main__":
    main()
