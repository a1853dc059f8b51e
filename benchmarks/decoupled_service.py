"""Where a decoupled drafter service (M:N, drafts one round ahead for the b likely outcomes)
would pay against SD's sequential step, from the building blocks in sim/drafter_service.py.

APPROXIMATE, and not a run of the simulator: each verifier step is one batch of m requests,
each request's accepted length drawn at the mean acceptance (no spread across requests); the
requests that miss are re-drafted after verification, as one drafting of that many; prices
come from the default scenario's cost model (Qwen3-32B target on its TP group, Qwen3-1.7B
drafting), context 600 tokens a request, no prefill, no link time. SD's row is the same cost
model's draft-then-verify step on the same batch. Tokens per second are the whole system's
(V verifiers), per GPU over V x TP + D GPUs. An outcome is the accepted length alone (the
bonus token taken as guessed): the service's figures are an upper bound.

    python benchmarks/decoupled_service.py [--record]
"""

from __future__ import annotations

import numpy as np
from recording import study_main

from psdsim.sim.costs import NO_CHUNKS, complete
from psdsim.sim.drafter_service import accepted_length_pmf, booked_rounds
from psdsim.sim.execution import step_cost
from psdsim.sim.scenario import Scenario, catalog_for, validate

ACCEPTANCE, BATCH, CONTEXT, ROUNDS, SEED = 0.7, 16, 600, 2000, 1


def study() -> list[str]:
    s = validate(Scenario())
    cost = complete(step_cost(s, catalog_for(s)))
    tp = s.tensor_parallel_size
    lines = [f"acceptance {ACCEPTANCE}, batch {BATCH}/verifier, TP {tp}, D = 1 drafter; "
                    f"{ROUNDS} rounds, seed {SEED}",
                    "| k | b | V | step ms (service) | tok/s/GPU service | tok/s/GPU SD (1 verifier, TP+1) |",
                    "|---|---|---|---|---|---|"]
    for k in (1, 3, 5):
        pmf = accepted_length_pmf(ACCEPTANCE, k)
        tokens = BATCH * (float(np.dot(np.arange(k + 1), pmf)) + 1.0)
        verify = cost.verify(BATCH, BATCH * (k + 1), BATCH * CONTEXT, NO_CHUNKS)
        sd = tokens / (cost.draft(BATCH, k, BATCH * CONTEXT) + verify) / (tp + 1)
        for b in (1, 2, 3):
            branch = cost.draft(BATCH * b, k, BATCH * CONTEXT)

            def miss(n: int, k: int = k) -> float:
                return cost.draft(n, k, BATCH * CONTEXT)

            for v in (1, 2, 4):
                end, _, _ = booked_rounds(ACCEPTANCE, k, b, verify, branch, miss, v, 1, ROUNDS,
                                          np.random.default_rng(SEED), batch=BATCH)
                step = end / ROUNDS
                per_gpu = v * tokens / step / (v * tp + 1)
                lines.append(f"| {k} | {b} | {v} | {step * 1e3:.1f} | {per_gpu:.1f} | {sd:.1f} |")
    return lines


def main() -> None:
    study_main(__doc__, "decoupled_service", "Decoupled drafter service vs SD (approximate)", study,
               notes=__doc__.split("\n\n")[1].replace("\n", " "))


if __name__ == "__main__":
    main()
