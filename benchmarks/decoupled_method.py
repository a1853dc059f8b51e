"""The decoupled drafter service (`method = "decoupled"`) against SD and PSD, each a full run of the
simulator on the same requests: the default scenario (Qwen3-32B at TP = 4 on L40S, Qwen3-1.7B
drafting over PCIe Gen4, ShareGPT prompts), 128 requests offline, 128 output tokens, m = 16, over
k, the replicas V, the drafter GPUs D and the branches b. Output tokens/s over the makespan, per
GPU (V x TP + D for the service), the share of verified requests whose drafts missed, and the
mean queueing at the shared drafter per step. An outcome is the accepted length alone (the bonus
token taken as guessed): the service's figures are an upper bound.

    python benchmarks/decoupled_method.py [--record]
"""

from __future__ import annotations

import numpy as np
from recording import study_main

from psdsim.sim.run import simulate
from psdsim.sim.scenario import Scenario

BASE = dict(requests=128, output_len=128, m=16, seed=0)
SERVICE = [(1, 1), (2, 1), (2, 2), (4, 2)]   # (V, D)


def _row(label: str, s: Scenario) -> str:
    r = simulate(s)
    sm, st = r.summary, r.steps
    missed = queue = "-"
    if s.method == "decoupled":
        verified = st["verified"].sum()
        missed = f"{st['drafts_missed'].sum() / verified:.0%}" if verified else "-"
        queue = f"{np.mean(st['drafter_queue_s']) * 1e3:.1f}"
    return (f"| {s.k} | {label} | {sm['gpus']} | {sm['output_tok_s']:.0f} | "
            f"{sm['output_tok_s'] / sm['gpus']:.1f} | {missed} | {queue} |")


def study() -> list[str]:
    lines = ["| k | method | GPUs | output tok/s | per GPU | drafts missed | queue ms/step |",
             "|---|---|---|---|---|---|---|"]
    for k in (1, 3):
        for method in ("sd", "psd"):
            lines.append(_row(method, Scenario(method=method, k=k, **BASE)))
        for verifiers, drafters in SERVICE:
            for branches in (1, 2):
                s = Scenario(method="decoupled", k=k, service_verifiers=verifiers, service_drafters=drafters,
                             service_branches=branches, **BASE)
                lines.append(_row(f"decoupled V={verifiers} D={drafters} b={branches}", s))
    return lines


def main() -> None:
    title = "The decoupled drafter service as a method, against SD and PSD"
    study_main(__doc__, "decoupled_method", title, study,
               notes=__doc__.split("\n\n")[0].replace("\n", " "))


if __name__ == "__main__":
    main()
