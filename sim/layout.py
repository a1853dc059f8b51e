"""Where each method puts its models: the verifier group's TP degree and the drafter's GPU(s).

    ar                   target on `tensor_parallel_size` GPUs, no draft model
    sd, sd-2m            the draft at TP=1 on GPU 0 of the verifier group (co-located)
    sd-5gpu (drafter)    the draft on a GPU of its own, steps still sequential (GPU-fair SD)
    sd-5gpu (tp)         the target on one more GPU of TP, the draft co-located (GPU-fair SD)
    psd, psd+tetris      the draft on `drafters` GPUs of its own (MineDraft: one)
    adaptive             PSD's, one drafter GPU, whichever mode a step runs
    pearl                the draft on one GPU of its own
    decoupled            V verifier groups of `tensor_parallel_size` GPUs, the draft on D GPUs of
                         its own serving all of them
"""

from __future__ import annotations

from dataclasses import dataclass

from psdsim.sim.scenario import Scenario

NONE, COLOCATED, DEDICATED = "none", "colocated", "dedicated"


@dataclass(frozen=True)
class Layout:
    verifier_tp: int
    drafter: str          # NONE, COLOCATED (verifier GPU 0) or DEDICATED
    drafter_gpus: int     # dedicated drafter GPUs
    verifier_groups: int = 1   # verifier replicas, each a group of verifier_tp GPUs

    @property
    def gpus(self) -> int:
        verifiers = self.verifier_tp * self.verifier_groups
        return verifiers + (self.drafter_gpus if self.drafter == DEDICATED else 0)

    @property
    def over_link(self) -> bool:
        """Whether drafter and verifier exchange messages over the link every step."""
        return self.drafter == DEDICATED


def layout_for(s: Scenario) -> Layout:
    tp = s.tensor_parallel_size
    if s.method == "ar":
        return Layout(tp, NONE, 0)
    if s.method in ("sd", "sd-2m"):
        return Layout(tp, COLOCATED, 0)
    if s.method == "sd-5gpu":
        if s.sd_5gpu_layout == "tp":
            return Layout(tp + 1, COLOCATED, 0)
        return Layout(tp, DEDICATED, 1)
    if s.method == "decoupled":
        return Layout(tp, DEDICATED, s.service_drafters, s.service_verifiers)
    if s.method == "pearl":
        return Layout(tp, DEDICATED, 1)
    return Layout(tp, DEDICATED, s.drafters)  # psd, psd+tetris, adaptive
