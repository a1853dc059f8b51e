"""Whether a fitted profile can describe the scenario it prices: the hardware and models it was
fitted on against the scenario's (source_warnings), and its passes against the least time the
scenario's GPUs take to read each model's weights once (floor_warnings)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psdsim.sim.errors import ScenarioError
from psdsim.sim.layout import DEDICATED, layout_for
from psdsim.sim.profile_schema import Profile, Term, draft_features, prefill_features, verify_features
from psdsim.sim.scenario import catalog_for

# Profile source keys compared with the scenario field of the same meaning.
_SOURCE_FIELDS = (("gpu", "gpu"), ("drafter_gpu", "drafter_gpu_key"), ("target", "target"),
                  ("draft", "draft"), ("tensor_parallel_size", "tensor_parallel_size"))


def source_warnings(profile: Profile, s: Any) -> list[str]:
    """Where the scenario's hardware or models differ from those the profile was fitted on."""
    out = []
    for key, attr in _SOURCE_FIELDS:
        fitted = profile.source.get(key)
        if fitted not in (None, "") and hasattr(s, attr) and str(getattr(s, attr)) != str(fitted):
            out.append(f"profile: fitted for {key} {fitted}, scenario has {getattr(s, attr)}")
    return out + floor_warnings(profile, s)


# A profile whose passes are this many times faster than reading the weights once allows is no
# measurement of these GPUs at all (a trace of 1 ns kernels, a hand-edited file): its run is
# refused. Within it, a profile from faster GPUs than the scenario's is still told apart by a warning.
FLOOR_REFUSAL = 10.0


@dataclass(frozen=True)
class _Floor:
    """The least time one pass of a model can take on its GPUs: its weights read once at the
    GPUs' full memory bandwidth (the analytic model's roofline with no compute, no KV and a
    perfect memory system)."""

    side: str        # "verify" (the target) or "draft"
    model: str
    gpu: str
    seconds: float


def _floors(s: Any) -> list[_Floor]:
    cat = catalog_for(s)
    layout = layout_for(s)
    target_gpu = cat.gpus[s.gpu]
    floors = [_Floor("verify", s.target, s.gpu, cat.models[s.target].dense_streamed_bytes
                     / layout.verifier_tp / (target_gpu.memory_bandwidth_gbps * 1e9))]
    if s.speculates:
        gpu_key = s.drafter_gpu_key if layout.drafter == DEDICATED else s.gpu
        floors.append(_Floor("draft", s.draft, gpu_key, cat.models[s.draft].dense_streamed_bytes
                             / (cat.gpus[gpu_key].memory_bandwidth_gbps * 1e9)))
    return floors


# The terms that price one pass of each side's model: a prefill pass reads the target's weights
# as a verify pass does, a draft prefill the draft's.
FLOOR_TERMS = {"verify": ("verify", "prefill"), "draft": ("draft", "draft_prefill")}


def _cheapest_pass(term: Term) -> float:
    """The term's price of one pass at the low end of every range it was fitted on: with every
    coefficient >= 0 and each feature growing with each size, no pass within its ranges costs less."""
    low = {var: lo for var, (lo, _) in term.ranges.items()}
    tokens = max(low.get("tokens", 1.0), 1.0)
    if term.name == "verify":
        return term(verify_features(tokens, low.get("ctx", 0.0)))
    if term.name in ("prefill", "draft_prefill"):
        return term(prefill_features(tokens, 0.0, 0.0))
    k = max(low.get("k", 1.0), 1.0)
    return term(draft_features(max(low.get("batch", 1.0), 1.0), k, low.get("ctx", 0.0))) / k


def _fastest_factor(profile: Profile, side: str) -> float:
    """The least a side's passes are scaled by: a measured contention or after-idle factor below
    1 (noise of a loaded machine) prices the pass faster than it runs alone, and the run may
    apply both to one pass."""
    contention = float(profile.contention.get(side, 1.0))
    idle = [float(factor) for _, factor in profile.idle_points(side)]
    return min(1.0, contention) * min([1.0, *idle])


def floor_warnings(profile: Profile, s: Any) -> list[str]:
    """Where the profile prices a target or a draft pass (with its fastest slowdown factor)
    below the time the scenario's GPUs take to read that model's weights once: a warning, since
    it cannot describe this hardware; a refusal where it is FLOOR_REFUSAL times below, since it
    describes no hardware."""
    out = []
    for floor in _floors(s):
        factor = _fastest_factor(profile, floor.side)
        for name in FLOOR_TERMS[floor.side]:
            if name in profile.terms:
                out += _below_floor(name, _cheapest_pass(profile.terms[name]) * factor, floor, s)
    return out


def _below_floor(name: str, priced: float, floor: _Floor, s: Any) -> list[str]:
    """The warning (or the refusal) for a `name` pass priced at `priced` seconds against `floor`."""
    if priced >= floor.seconds:
        return []
    what = (f"prices a {name} pass at {priced * 1e3:.3g} ms, below the {floor.seconds * 1e3:.3g} "
            f"ms {floor.gpu} takes to read {floor.model}'s weights once")
    if priced * FLOOR_REFUSAL < floor.seconds:
        raise ScenarioError("profile", f"{s.profile or 'the profile given'}: {what}, over "
                            f"{FLOOR_REFUSAL:g}x below it: no measurement of these GPUs",
                            "calibrate on traces of this hardware and models, or check the trace's "
                            "kernel times")
    return [f"profile: {what}: it does not describe this hardware"]
