"""What skews PSD's two sub-batches: imbalance, preemptions and wasted steps per scenario.

Prints the table of docs/methods.md's "Scheduler fidelity" section: the default models and GPUs,
400 ShareGPT-like requests of 128 output tokens, seed 1; imbalance is the mean |B1 - B0| over
decode steps while requests still wait.

    python benchmarks/scheduler_effects.py [--record]

`--record` also writes the table to docs/measurements/scheduler_effects.md with date, commit and
machine.
"""

from __future__ import annotations

import argparse

import numpy as np
from recording import add_record_flag, write

from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario

BASE = dict(requests=400, output_len=128, prompt_len=0, seed=1)
CASES = [
    ("ample KV, no aborts", {}),
    ("abort_fraction=0.2", dict(abort_fraction=0.2)),
    ("abort_fraction=0.2, rebalance", dict(abort_fraction=0.2, rebalance=True)),
    ("same, balance_by=kv", dict(abort_fraction=0.2, rebalance=True, balance_by="kv")),
    ("num_gpu_blocks_override=700 (recompute)", dict(num_gpu_blocks_override=700)),
    ("same, rebalance", dict(num_gpu_blocks_override=700, rebalance=True)),
    ("same, rebalance, balance_by=kv", dict(num_gpu_blocks_override=700, rebalance=True, balance_by="kv")),
    ("same, preemption_mode=swap", dict(num_gpu_blocks_override=700, preemption_mode="swap")),
    ("rate=50 burst, prefill steps", dict(rate=50.0)),
    ("rate=50 burst, chunked prefill (512)",
     dict(rate=50.0, enable_chunked_prefill=True, max_num_batched_tokens=512)),
    ("same, balance_by=kv", dict(rate=50.0, enable_chunked_prefill=True, max_num_batched_tokens=512,
                                 balance_by="kv")),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_record_flag(parser)
    args = parser.parse_args()
    lines = [f"{'scenario':<42}{'imbalance':>10}{'preempt':>9}{'wasted':>8}{'decode tok/s':>14}"]
    print(lines[0])
    for label, changes in CASES:
        r = simulate(Scenario(**BASE, **changes))
        st, sm = r.steps, r.summary
        loaded = (st["kind"] == "decode") & (st["waiting"] > 0)
        imbalance = float(np.abs(st["batch1"] - st["batch0"])[loaded].mean())
        lines.append(f"{label:<42}{imbalance:>10.2f}{sm['preemptions']:>9}{sm['wasted_verifications']:>8}"
                     f"{sm['throughput_tok_s']:>14.1f}")
        print(lines[-1], flush=True)
    if args.record:
        notes = ("The default models and GPUs, 400 ShareGPT-like requests of 128 output tokens, seed 1; "
                 "imbalance is the mean |B1 - B0| over decode steps while requests still wait.")
        print(f"recorded: {write('scheduler_effects', 'What skews PSD sub-batches', lines, notes)}")


if __name__ == "__main__":
    main()
