"""What skews PSD's two sub-batches: imbalance, preemptions and wasted steps per scenario.

Prints the table of README.md's "Scheduler fidelity" section: the default models and GPUs,
400 ShareGPT-like requests of 128 output tokens, seed 1; imbalance is the mean |B1 - B0| over
decode steps while requests still wait.

    python benchmarks/scheduler_effects.py
"""

from __future__ import annotations

import numpy as np
from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario

BASE = dict(requests=400, output_len=128, prompt_len=0, seed=1)
CASES = [
    ("ample KV, no aborts", {}),
    ("abort_fraction=0.2", dict(abort_fraction=0.2)),
    ("abort_fraction=0.2, rebalance", dict(abort_fraction=0.2, rebalance=True)),
    ("num_gpu_blocks_override=700 (recompute)", dict(num_gpu_blocks_override=700)),
    ("same, rebalance", dict(num_gpu_blocks_override=700, rebalance=True)),
    ("same, preemption_mode=swap", dict(num_gpu_blocks_override=700, preemption_mode="swap")),
    ("rate=50 burst, prefill steps", dict(rate=50.0)),
    ("rate=50 burst, chunked prefill (512)",
     dict(rate=50.0, enable_chunked_prefill=True, max_num_batched_tokens=512)),
]


def main() -> None:
    print(f"{'scenario':<42}{'imbalance':>10}{'preempt':>9}{'wasted':>8}{'decode tok/s':>14}")
    for label, changes in CASES:
        r = simulate(Scenario(**BASE, **changes))
        st, sm = r.steps, r.summary
        loaded = (st["kind"] == "decode") & (st["waiting"] > 0)
        imbalance = float(np.abs(st["batch1"] - st["batch0"])[loaded].mean())
        print(f"{label:<42}{imbalance:>10.2f}{sm['preemptions']:>9}{sm['wasted_verifications']:>8}"
              f"{sm['throughput_tok_s']:>14.1f}")


if __name__ == "__main__":
    main()
