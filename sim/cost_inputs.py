"""Which step costs each drawn cost input can change, and so which inputs a fitted profile takes
out of `--intervals`.

A fitted profile (sim/profile.py FittedCost) prices the kinds of work it has terms for and hands
every other StepCost call to the catalog's cost model (sim/costs.py AnalyticCost, or
sim/execution.py EngineCost): a drawn catalog number or efficiency moves such a run only through
the calls that still reach that fallback. An input none of whose calls does is not drawn, so the
interval narrows to what the user's own traces have not measured, and the ranking loses the
input. Two tables, each read off the code it describes and held to it by tests/sim/test_cost_inputs.py
(a FittedCost lacking a term reaches its fallback through exactly the calls listed for that term;
perturbing an input on the cost model itself changes only the calls it is listed for, and every
listed call in some layout):

* FALLBACKS: each StepCost call of the fallback, and the profile terms that must all be fitted
  for FittedCost to price it itself (none: no term prices it, it always reaches the catalog);
* FEEDS: each cost input, a Scenario field or a catalog field in the role its entry plays in the
  run (ROLES), and the StepCost calls it changes.

An input FEEDS does not list (a GPU's memory, which sizes the KV cache, not a step) is always
drawn: what is not known to be priced by the profile is left to vary.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from psdsim.sim.catalog import Catalog
from psdsim.sim.layout import DEDICATED, layout_for
from psdsim.sim.profile_schema import TERMS
from psdsim.sim.scenario import Scenario

# The fallback's calls, by the StepCost member FittedCost hands on (`framework` stands for the
# per-step overhead too: the fixed `overhead` is what a cost model without a framework term charges).
FALLBACKS: dict[str, tuple[str, ...]] = {
    "draft": ("draft",),
    "driver_prep": ("draft",),        # a fitted draft term timed the driver's preparation with it
    "verify": ("verify", "prefill"),  # a pass carrying prefill chunks needs both fitted
    "draft_chunks": ("draft_prefill",),
    "comm": ("comm",),
    "broadcast": ("broadcast",),
    "reject": ("reject",),
    "framework": ("overhead",),
    "swap": (),                       # no profile term times KV swaps
}

# The roles a catalog entry plays in a run (entry_roles), as docs/summary.md names them. A
# Scenario input has the role "" (and the table "").
ROLES: dict[str, str] = {
    "engine": "the engine's",
    "target": "the verifier GPU's",
    "driver": "the drafter GPU's",     # the verifier's GPU 0 where the method co-locates the draft
    "link": "the drafter-verifier link's",
    "tp": "the TP link's",             # only at TP > 1
    "host": "the host link's",         # only while preemption swaps KV out
}

PASSES = frozenset({"draft", "verify", "draft_chunks"})   # a forward pass of either model
_TARGET = frozenset({"verify"})                            # the target's passes (prefill chunks ride in them)
_DRIVER = frozenset({"draft", "draft_chunks"})             # the draft model's passes

FEEDS: dict[tuple[str, str, str], frozenset[str]] = {
    # the rooflines' efficiencies (sim/costs.py ForwardModel); rejection sampling streams the
    # probabilities at the driver GPU's achieved bandwidth; the engine model's sampler too
    ("", "", "mem_efficiency"): PASSES | {"reject"},
    ("", "", "compute_efficiency"): PASSES,
    ("", "", "launch_overhead_us"): PASSES,             # roofline only: the engine model launches its own
    ("", "", "step_overhead_ms"): frozenset({"framework"}),
    ("gpus", "target", "memory_bandwidth_gbps"): _TARGET,
    ("gpus", "target", "bf16_tflops"): _TARGET,
    ("gpus", "target", "fp8_tflops"): _TARGET,
    ("gpus", "driver", "memory_bandwidth_gbps"): _DRIVER | {"reject"},
    ("gpus", "driver", "bf16_tflops"): _DRIVER,
    ("gpus", "driver", "fp8_tflops"): _DRIVER,
    # Link formulas (sim/catalog Link): a message pays latency + bytes / bandwidth, a broadcast the
    # all-reduce latency instead; the drafter runs at TP = 1, so its link carries no all-reduce.
    ("links", "link", "p2p_latency_us"): frozenset({"comm"}),
    ("links", "link", "p2p_bandwidth_gbps"): frozenset({"comm", "broadcast"}),
    ("links", "link", "allreduce_latency_us"): frozenset({"broadcast"}),
    ("links", "link", "allreduce_busbw_gbps"): frozenset(),
    ("links", "tp", "allreduce_latency_us"): _TARGET,
    ("links", "tp", "allreduce_busbw_gbps"): _TARGET,
    ("links", "tp", "p2p_latency_us"): _TARGET,          # the engine model's logits gather to rank 0
    ("links", "tp", "p2p_bandwidth_gbps"): _TARGET,
    ("links", "host", "p2p_latency_us"): frozenset({"swap"}),
    ("links", "host", "p2p_bandwidth_gbps"): frozenset({"swap"}),
    ("links", "host", "allreduce_latency_us"): frozenset(),
    ("links", "host", "allreduce_busbw_gbps"): frozenset(),
    # The engine execution model (sim/execution.py): per pass, kernels and their launches; per
    # step, input preparation (also the driver's, MineDraft), the sampler, syncs, the framework.
    ("engines", "engine", "kernel_us"): PASSES,
    ("engines", "engine", "launch_us"): PASSES,
    ("engines", "engine", "graph_launch_us"): PASSES,
    ("engines", "engine", "collective_us"): _TARGET,     # all-reduces: the target's TP group only
    ("engines", "engine", "collective_launch_us"): _TARGET,
    ("engines", "engine", "prepare_ms"): PASSES | {"driver_prep"},
    ("engines", "engine", "prepare_request_us"): PASSES | {"driver_prep"},
    ("engines", "engine", "prepare_token_us"): PASSES | {"driver_prep"},
    ("engines", "engine", "sampler_host_ms"): frozenset({"draft", "verify"}),   # a prefill chunk of the
    ("engines", "engine", "sampler_host_row_us"): frozenset({"draft", "verify"}),  # draft samples nothing
    ("engines", "engine", "sampler_vocab_bytes"): PASSES,
    ("engines", "engine", "sync_us"): PASSES | {"reject"},
    ("engines", "engine", "step_ms"): frozenset({"framework"}),
    ("engines", "engine", "step_request_us"): frozenset({"framework"}),
    ("engines", "engine", "output_request_us"): frozenset({"framework"}),
    ("engines", "engine", "exposed_ms"): frozenset({"framework"}),
    ("engines", "engine", "metadata_ms"): frozenset({"driver_prep", "verify"}),
    ("engines", "engine", "metadata_request_us"): frozenset({"driver_prep", "verify"}),
    ("engines", "engine", "spec_worker_ms"): frozenset({"draft"}),
    ("engines", "engine", "spec_worker_request_us"): frozenset({"draft"}),
    ("engines", "engine", "spec_worker_draft_us"): frozenset({"draft"}),
    # an unfused implementation's elementwise bytes and an attention kernel priced apart: every pass
    ("engines", "engine", "elementwise_hidden"): PASSES,
    ("engines", "engine", "elementwise_heads"): PASSES,
    ("engines", "engine", "elementwise_kv_heads"): PASSES,
    ("engines", "engine", "elementwise_mlp"): PASSES,
    ("engines", "engine", "attention_efficiency"): PASSES,
}

Roles = Mapping[tuple[str, str], frozenset[str]]   # (table, entry key) -> its roles in the run


def entry_roles(s: Scenario, methods: Sequence[str], cat: Catalog) -> Roles:
    """The role each catalog entry plays when `s` runs under any of `methods` (the layout, and so
    which GPU drafts and whether the target is split over a fabric, is the method's)."""
    roles: dict[tuple[str, str], set[str]] = {}

    def add(table: str, key: str, role: str) -> None:
        roles.setdefault((table, key), set()).add(role)

    add("engines", s.engine_key, "engine")
    add("links", s.link, "link")
    add("gpus", s.gpu, "target")
    for method in methods:
        layout = layout_for(replace(s, method=method))
        driver = s.drafter_gpu_key if layout.drafter == DEDICATED else s.gpu
        add("gpus", driver, "driver")
        if layout.verifier_tp > 1:
            add("links", s.tp_link_key, "tp")
        if s.preemption_mode == "swap":
            for gpu in {s.gpu, driver}:
                add("links", cat.gpus[gpu].host_link, "host")
    return {entry: frozenset(r) for entry, r in roles.items()}


def calls_fed(roles: Roles, table: str, key: str, name: str) -> frozenset[str] | None:
    """The StepCost calls an input can change in the run `roles` describes; None when FEEDS does
    not know the input in one of its entry's roles (it is then always drawn)."""
    entry_roles_ = roles.get((table, key), frozenset()) if table else frozenset({""})
    calls: set[str] = set()
    for role in entry_roles_:
        fed = FEEDS.get((table, role, name))
        if fed is None:
            return None
        calls |= fed
    return frozenset(calls)


def reaches_fallback(calls: Iterable[str], fitted: Iterable[str]) -> bool:
    """Whether some call among `calls` is still priced by the catalog under a profile whose terms
    are `fitted`."""
    have = set(fitted)
    return any(not FALLBACKS[c] or not set(FALLBACKS[c]) <= have for c in calls)


def still_drawn(roles: Roles, fitted: Iterable[str], table: str, key: str, name: str) -> bool:
    """Whether an input moves a run whose profile fits the terms `fitted`: FEEDS does not know it,
    or a call it feeds still reaches the catalog."""
    calls = calls_fed(roles, table, key, name)
    return calls is None or reaches_fallback(calls, fitted)


def dropped_by(calls: Iterable[str]) -> tuple[str, ...] | None:
    """The profile terms that, all fitted, take an input feeding `calls` out of the draws (in
    TERMS order); None when no profile does (a call no term prices)."""
    calls = set(calls)
    if any(not FALLBACKS[c] for c in calls):
        return None
    return tuple(t for t in TERMS if any(t in FALLBACKS[c] for c in calls))
