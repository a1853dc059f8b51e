"""Where balancing PSD's sub-batches by KV tokens (`balance_by = "kv"`) pays, and where not.

Decode throughput with MineDraft's balance by request count against balance by KV, on the
default models and GPUs (Qwen3-32B on 4 x L40S, Qwen3-1.7B drafting), k = 3, seed 1: the
catalog's datasets offline and at 4 requests/s, with and without `rebalance`, and mixes of long
and short prompts arriving at once in turn (the count rule's alternation then puts every long
prompt in one sub-batch).

    python benchmarks/kv_balance.py [--record]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from recording import Lines, add_record_flag, write

from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario


def gain(**fields: object) -> tuple[float, float]:
    """Decode throughput (tok/s) balancing by request count, then by KV."""
    by = [simulate(Scenario(seed=1, balance_by=b, **fields)).summary["throughput_tok_s"]
          for b in ("requests", "kv")]
    return by[0], by[1]


def alternating(folder: Path, long: int, requests: int) -> str:
    """A trace of `requests` at time 0, `long`- and 100-token prompts in turn, 64 output tokens."""
    path = folder / f"alternating-{long}-{requests}.csv"
    rows = ["arrival_s,prompt_tokens,output_tokens"]
    rows += [f"0,{long if i % 2 == 0 else 100},64" for i in range(requests)]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_record_flag(parser)
    args = parser.parse_args()
    out = Lines()
    out(f"{'workload':<44}{'m':>4}{'by count':>10}{'by KV':>10}{'gain':>9}")

    def row(label: str, m: int, **fields: object) -> None:
        count, kv = gain(m=m, **fields)
        out(f"{label:<44}{m:>4}{count:>10.1f}{kv:>10.1f}{100 * (kv / count - 1):>+8.2f}%")

    for dataset in ("sharegpt", "arena", "tough", "spec-bench"):
        for rebalance in (False, True):
            for rate in (None, 4.0):
                label = f"{dataset}, {'offline' if rate is None else f'{rate:g} req/s'}" \
                        + (", rebalance" if rebalance else "")
                for m in (8, 32):
                    row(label, m, requests=480, dataset=dataset, rate=rate, rebalance=rebalance)
    with tempfile.TemporaryDirectory() as tmp:
        for long, per_m in ((2000, 8), (6000, 8), (6000, 4)):
            for m in (8, 16):
                trace = alternating(Path(tmp), long, per_m * m)
                row(f"{per_m * m} at once, {long}/100-token prompts in turn", m, trace=trace,
                    max_model_len=8192, max_num_batched_tokens=8192)
    if args.record:
        notes = ("Decode throughput (tok/s), the default models and GPUs, k = 3, seed 1; gain = by KV "
                 "over by count. Offline: all requests at time 0; the alternating mixes are traces made "
                 "by the script.")
        print(f"recorded: {write('kv_balance', 'Balancing PSD sub-batches by KV tokens', out, notes)}")


if __name__ == "__main__":
    main()
