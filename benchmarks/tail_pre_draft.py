"""Where pre-drafting PSD's tail (`tail = "pre-draft"`, `"pre-draft-pearl"`) pays, and where not.

MineDraft's setting2 (Qwen3-32B on 4 x L40S, Qwen3-1.7B drafting, m = 16) on Spec-Bench, each
tail policy beside MineDraft's sequential fallback (`tail = "sd"`), means over seeds 1-3:

1. offline workloads of 64 to 480 requests, k = 1..5 (the tail: the last steps, once one
   sub-batch has drained; psdsim's outputs have a fixed length, so both drain nearly together);
2. the same offline with output lengths 16 to 1,024 tokens and prompts of 32 to 512 (a trace the
   script draws, uniform, seeded by the run's seed), k = 1..4: a longer tail;
3. 200 requests arriving at 0.1 to 2 requests/s, k = 1..4 (at low load the running set often
   fills one sub-batch only, and the tail is most of the run).

Each row gives decode throughput (the paper's definition) and the parallelization rate of each
policy, the share of decode steps with one sub-batch empty and drafting's time against
verification's per decode step (both of the fallback's run: where drafting is the longer, a
rejection costs the re-drafting policy more than the fallback), and the pre-drafts thrown away.

    python benchmarks/tail_pre_draft.py [--record]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from statistics import mean
from typing import Any

import numpy as np
from recording import Lines, add_record_flag, write

from psdsim.sim.run import simulate
from psdsim.sim.scenario import load_scenario

SEEDS = (1, 2, 3)
TAILS = ("sd", "pre-draft", "pre-draft-pearl")


def varied(folder: Path, requests: int, seed: int) -> str:
    """A trace of `requests` at time 0 with uniform prompt (32-512) and output (16-1,024) lengths."""
    rng = np.random.default_rng(seed)
    prompts, outputs = rng.integers(32, 513, requests), rng.integers(16, 1025, requests)
    path = folder / f"varied-{requests}-{seed}.csv"
    rows = "".join(f"0,{p},{o}\n" for p, o in zip(prompts.tolist(), outputs.tolist(), strict=True))
    path.write_text("arrival_s,prompt_tokens,output_tokens\n" + rows, encoding="utf-8")
    return str(path)


def measured(tail: str, traces: Path | None = None, **fields: Any) -> dict[str, float]:
    """Means over SEEDS of one policy's figures (with the fallback's tail share and draft/verify);
    with `traces`, each seed replays its own varied-length trace written there."""
    rows = []
    for seed in SEEDS:
        trace = {"trace": varied(traces, fields["requests"], seed)} if traces is not None else {}
        overrides = [f"{k}={v}" for k, v in {**fields, **trace, "seed": seed, "tail": tail}.items()]
        r = simulate(load_scenario(overrides=overrides, preset="setting2"))
        sm, st = r.summary, r.steps
        decode = st["kind"] == "decode"
        one_empty = decode & ((st["batch0"] == 0) | (st["batch1"] == 0))
        rows.append({"tok_s": sm["throughput_tok_s"], "par": sm["parallelization_rate"],
                     "tpot": sm["tpot_ms"]["p50"],
                     "tail": np.count_nonzero(one_empty) / np.count_nonzero(decode),
                     "ratio": sm["mean_draft_ms"] / sm["mean_verify_ms"],
                     "wasted": sm["pre_drafts_wasted"] or 0})
    return {key: mean(row[key] for row in rows) for key in rows[0]}


def table(out: Lines, label: str, cases: list[tuple[str, dict[str, Any]]],
          traces: Path | None = None) -> None:
    out(f"{label:<22}{'tail':>6}{'draft/':>7}{'tok/s':>8}{'par':>7}{'pre-draft':>11}{'par':>7}"
        f"{'wasted':>8}{'pearl':>9}{'par':>7}{'TPOT p50 ms':>14}")
    out(f"{'':<22}{'share':>6}{'verify':>7}{'sd':>8}{'sd':>7}{'gain':>11}{'':>7}{'':>8}{'gain':>9}"
        f"{'':>7}{'sd, pre, pearl':>14}")
    for name, fields in cases:
        sd, pre, pearl = (measured(tail, traces, **fields) for tail in TAILS)
        out(f"{name:<22}{sd['tail']:>6.2f}{sd['ratio']:>7.2f}{sd['tok_s']:>8.1f}{sd['par']:>7.3f}"
            f"{100 * (pre['tok_s'] / sd['tok_s'] - 1):>+10.2f}%{pre['par']:>7.3f}{pre['wasted']:>8.0f}"
            f"{100 * (pearl['tok_s'] / sd['tok_s'] - 1):>+8.2f}%{pearl['par']:>7.3f}"
            f"{sd['tpot']:>6.1f}{pre['tpot']:>5.1f}{pearl['tpot']:>5.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_record_flag(parser)
    args = parser.parse_args()
    out = Lines()
    common = {"dataset": "spec-bench", "m": 16}
    table(out, "offline requests, k", [(f"{n}, k={k}", {**common, "requests": n, "k": k})
                                       for n in (64, 128, 240, 480) for k in range(1, 6)])
    out("")
    with tempfile.TemporaryDirectory() as tmp:
        table(out, "varied lengths, k", [(f"{n}, k={k}", {**common, "requests": n, "k": k})
                                         for n in (64, 128, 480) for k in range(1, 5)], Path(tmp))
    out("")
    table(out, "req/s, k", [(f"{rate:g}, k={k}", {**common, "requests": 200, "rate": rate, "k": k})
                            for rate in (0.1, 0.25, 0.5, 1.0, 2.0) for k in range(1, 5)])
    if args.record:
        notes = ("setting2 (Qwen3-32B on 4 x L40S, Qwen3-1.7B, m = 16, the vllm-0.9.2-v0-eager "
                 "engine), Spec-Bench (varied lengths: the script's traces), means over seeds 1-3. tail "
                 "share and draft/verify: of the tail = sd run (decode steps with one sub-batch empty; "
                 "mean drafting over mean verification time per decode step). gain: decode throughput "
                 "over tail = sd's; par: parallelization rate; wasted: pre-drafted tokens thrown away per "
                 "run (pre-draft). TPOT p50 of sd, pre-draft and pre-draft-pearl.")
        print(f"recorded: {write('tail_pre_draft', 'Pre-drafting PSD tail', out, notes)}")


if __name__ == "__main__":
    main()
