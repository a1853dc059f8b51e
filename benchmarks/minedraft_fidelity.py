"""What each MineDraft-fidelity rule moves: the code's behaviour (the default) against the what-if
that keeps the behaviour the code meant, on the scenarios where the rule bites.

Prints the table of docs/minedraft-fidelity.md ("Measured: the code vs the what-ifs"):

    python benchmarks/minedraft_fidelity.py
"""

from __future__ import annotations

from typing import Any

import numpy as np
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario

TIGHT = dict(k=8, block_size=4, num_gpu_blocks_override=400, prompt_len=64, output_len=64, requests=400,
             max_model_len=256, seed=0)
PRESSED = dict(requests=400, output_len=128, seed=1, num_gpu_blocks_override=700)
CHUNKED = dict(requests=400, output_len=128, seed=1, rate=50.0, enable_chunked_prefill=True,
               max_num_batched_tokens=512)
SWAPPING = dict(PRESSED, preemption_mode="swap")
PEARL = dict(method="pearl", requests=200, seed=0)
# (rule, scenario, field, the code's value, the what-if's value)
CASES: list[tuple[str, dict[str, Any], str, str, str]] = [
    ("1 KV, tight pool (k=8, block 4)", TIGHT, "kv_patch", "has_deferred", "intended"),
    ("1 KV, 700 blocks", PRESSED, "kv_patch", "has_deferred", "intended"),
    ("1 KV, setting2 (ample)", dict(requests=200, seed=0), "kv_patch", "has_deferred", "intended"),
    ("3 chunked prefill, rate 50", CHUNKED, "psd_prefill_chunks", "verified-only", "every-pass"),
    ("5 swap-in, 700 blocks", SWAPPING, "swap_in_batch", "verified", "drafted"),
    ("6 PEARL stale drafts, setting2", PEARL, "pearl_stale", "rejected", "as-fresh"),
]


def loaded_concurrency(steps: dict[str, np.ndarray]) -> float:
    d = (steps["kind"] == "decode") & (steps["waiting"] > 0)
    return float((steps["batch0"] + steps["batch1"])[d].mean()) if d.any() else float("nan")


def main() -> None:
    print(f"{'rule, scenario':<36}{'field':<20}{'tok/s code':>11}{'what-if':>9}{'change':>9}"
          f"{'VSR code':>10}{'what-if':>9}{'wasted':>8}{'conc.':>7}")
    for name, fields, field, code, what_if in CASES:
        a = simulate(Scenario(**fields, **{field: code}))
        b = simulate(Scenario(**fields, **{field: what_if}))
        sa, sb = a.summary, b.summary
        change = sa["throughput_tok_s"] / sb["throughput_tok_s"] - 1
        print(f"{name:<36}{field:<20}{sa['throughput_tok_s']:>11.1f}{sb['throughput_tok_s']:>9.1f}"
              f"{change:>+9.2%}{sa['vsr']:>10.3f}{sb['vsr']:>9.3f}"
              f"{sa['wasted_verifications'] - sb['wasted_verifications']:>+8d}"
              f"{loaded_concurrency(a.steps) - loaded_concurrency(b.steps):>+7.2f}")
    print("\nchange: the code's throughput_tok_s over the what-if's; wasted: the code's wasted "
          "verifications minus the what-if's; conc.: mean decoding requests while requests wait, "
          "code minus what-if.")


if __name__ == "__main__":
    main()
