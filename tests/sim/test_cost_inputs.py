"""sim/cost_inputs.py's two tables held to the code they describe.

FALLBACKS: a FittedCost lacking a term hands its fallback exactly the calls listed for that term.
FEEDS: perturbing one number on the cost model itself (AnalyticCost, EngineCost) changes only
the calls it is listed for in its entry's roles, and every listed call changes in some layout
below: a term whose fallback, or an input whose reach, changed silently fails here, before
--intervals drops an input that still moves a run (or keeps one that cannot)."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest

from psdsim.sim.catalog import GPU, Catalog, EngineProfile, Link, builtin_catalog
from psdsim.sim.cost_inputs import FALLBACKS, FEEDS, calls_fed, dropped_by, entry_roles, reaches_fallback
from psdsim.sim.costs import NO_CHUNKS, NO_PARTS, Chunks, OptionalCosts, StepCost
from psdsim.sim.execution import step_cost
from psdsim.sim.profile import FittedCost
from psdsim.sim.profile_schema import FEATURES, TERMS, Profile, Term
from psdsim.sim.scenario import Scenario
from psdsim.sim.uncertain_inputs import SCENARIO_RANGES

CHUNK = Chunks(tokens=512, pairs=512 * 256, ctx=0, completing=1, prompts=1)
BIG_CHUNK = Chunks(tokens=8192, pairs=8192 * 4096, ctx=1024, completing=4, prompts=4)


class _Spy(OptionalCosts):
    """A fallback that records each StepCost call a FittedCost hands it."""

    overhead = 1e-3

    def __init__(self) -> None:
        self.calls: set[str] = set()

    def _took(self, call: str) -> float:
        self.calls.add(call)
        return 1e-3

    def draft(self, batch: int, k: int, ctx: int) -> float:
        return self._took("draft")

    def verify(self, batch: int, tokens: int, ctx: int, chunks: Chunks = NO_CHUNKS) -> float:
        return self._took("verify")

    def draft_chunks(self, chunks: Chunks) -> float:
        return self._took("draft_chunks")

    def comm(self, nbytes: int) -> float:
        return self._took("comm")

    def broadcast(self, nbytes: int) -> float:
        return self._took("broadcast")

    def reject(self, positions: int) -> float:
        return self._took("reject")

    def swap(self, blocks: int) -> float:
        return self._took("swap")

    def framework(self, running: int, emitting: int) -> float:
        return self._took("framework")

    def driver_prep(self, requests: int, tokens: int) -> float:
        return self._took("driver_prep")

    def verify_parts(self, batch: int, tokens: int, chunks: Chunks = NO_CHUNKS):
        self._took("verify_parts")
        return NO_PARTS


def _asked(cost: StepCost) -> dict[str, tuple[float, ...]]:
    """Every call a run makes of a cost model, each on sizes that reach all of its branches: a
    memory-bound and a compute-bound pass of each model, passes with prefill chunks and without
    decodes, small and large messages."""
    return {
        "draft": (cost.draft(1, 1, 100), cost.draft(8, 4, 4000), cost.draft(2048, 2, 0)),
        "verify": (cost.verify(1, 2, 100), cost.verify(8, 40, 4000), cost.verify(256, 2048, 0),
                   cost.verify(4, 20, 400, CHUNK), cost.verify(0, 0, 0, BIG_CHUNK)),
        "draft_chunks": (cost.draft_chunks(CHUNK), cost.draft_chunks(BIG_CHUNK)),
        "comm": (cost.comm(0), cost.comm(1 << 20)),
        "broadcast": (cost.broadcast(0), cost.broadcast(1 << 20)),
        "reject": (cost.reject(1), cost.reject(1000)),
        "framework": (cost.overhead, cost.framework(4, 4), cost.framework(64, 32)),
        "driver_prep": (cost.driver_prep(4, 40), cost.driver_prep(64, 640)),
        "swap": (cost.swap(1), cost.swap(100)),
    }


def _profile(terms: frozenset[str]) -> Profile:
    return Profile({name: Term(name, tuple(1e-4 for _ in FEATURES[name]), 100, 0.01, None) for name in terms})


@pytest.mark.parametrize("missing", [(), *((t,) for t in TERMS), TERMS], ids=lambda m: "-".join(m) or "none")
def test_a_fitted_cost_hands_its_fallback_exactly_the_calls_its_missing_terms_leave(missing) -> None:
    fitted = frozenset(TERMS) - set(missing)
    spy = _Spy()
    _asked(FittedCost(_profile(fitted), spy))
    FittedCost(_profile(fitted), spy).verify_parts(4, 20, CHUNK)
    assert spy.calls == {c for c in FALLBACKS if reaches_fallback([c], fitted)}
    assert set(FALLBACKS) == set(_asked(_Spy()))   # the probe asks every call the table lists


def _fp8(cat: Catalog) -> Catalog:
    """The catalog with the two models of the scenarios below computing in FP8."""
    return replace(cat, models={**cat.models, **{k: replace(cat.models[k], compute="fp8")
                                                 for k in ("qwen3-32b", "qwen3-1.7b")}})


# Layouts that between them give every role of FEEDS an entry: the roofline and the MineDraft
# engine (eager, V0 framework, metadata) and vLLM V1 (CUDA graphs, async scheduling); PSD on a
# drafter GPU of another kind, SD co-located; TP over NVLink and over the drafter's own link; KV
# swapping over the host links.
LAYOUTS = {
    "roofline psd, one link for all, swap": (Scenario(engine="roofline", preemption_mode="swap"),
                                             builtin_catalog()),
    "v0 psd, h100 verifier, l40s drafter, swap": (
        Scenario(gpu="h100-sxm", drafter_gpu="l40s", link="pcie5", tp_link="nvlink4", preemption_mode="swap"),
        builtin_catalog()),
    "the same in fp8": (Scenario(gpu="h100-sxm", drafter_gpu="l40s", link="pcie5", tp_link="nvlink4"),
                        _fp8(builtin_catalog())),
    "v1 sd at tp 2": (Scenario(scheduler="vllm-v1", method="sd", tensor_parallel_size=2, gpu="h100-sxm",
                               link="nvlink4"), builtin_catalog()),
}
GROUP = {"gpus": GPU, "links": Link, "engines": EngineProfile}


def _float_fields(cls: type) -> list[str]:
    return [f.name for f in fields(cls) if f.type in ("float", float)]


def _changed(s: Scenario, cat: Catalog, before: dict[str, tuple[float, ...]]) -> set[str]:
    after = _asked(step_cost(s, cat))
    return {call for call in before if after[call] != before[call]}


def _moved(value: float) -> float:
    return value * 0.8 if value else 1.0


def _perturbations(s: Scenario, cat: Catalog):
    """(table, entry key, field, the cost model with that one number moved) for every number of
    the entries the run uses and every efficiency of SCENARIO_RANGES."""
    for name in SCENARIO_RANGES:
        yield "", "", name, replace(s, **{name: _moved(getattr(s, name))}), cat
    for table, key in entry_roles(s, [s.method], cat):
        group = getattr(cat, table)
        for name in _float_fields(GROUP[table]):
            entry = replace(group[key], **{name: _moved(getattr(group[key], name))})
            yield table, key, name, s, replace(cat, **{table: {**group, key: entry}})


def test_perturbing_an_input_changes_only_the_calls_it_feeds_and_each_it_feeds_somewhere() -> None:
    seen: set[tuple[str, str, str, str]] = set()   # (table, role, field, call) some layout changed
    for label, (s, cat) in LAYOUTS.items():
        roles = entry_roles(s, [s.method], cat)
        before = _asked(step_cost(s, cat))
        for table, key, name, s2, cat2 in _perturbations(s, cat):
            changed = _changed(s2, cat2, before)
            fed = calls_fed(roles, table, key, name)
            if fed is None:   # not a step cost: always drawn
                assert (table, name) == ("gpus", "memory_gb") and not changed, (label, key, name)
                continue
            assert changed <= fed, f"{label}: {table}.{key}.{name} changes {sorted(changed - fed)} too"
            for role in roles.get((table, key), {""}):
                seen |= {(table, role, name, call) for call in changed}
    listed = {(t, r, f, call) for (t, r, f), calls in FEEDS.items() for call in calls}
    assert listed - seen == set(), "listed calls no layout changes"


def test_every_number_a_catalog_may_range_is_listed_in_each_role_it_can_play() -> None:
    """An engine, link or GPU number the table does not know is drawn whatever the profile: only a
    GPU's memory (it sizes the KV cache, not a step) is meant to be."""
    roles = {"gpus": ("target", "driver"), "links": ("link", "tp", "host"), "engines": ("engine",)}
    numbers = {(t, r, f) for t, cls in GROUP.items() for r in roles[t] for f in _float_fields(cls)}
    unlisted = numbers - set(FEEDS)
    assert unlisted == {("gpus", "target", "memory_gb"), ("gpus", "driver", "memory_gb")}
    assert {f for t, _, f in FEEDS if not t} == set(SCENARIO_RANGES)


def test_an_input_drops_once_every_term_of_its_calls_is_fitted() -> None:
    mem = FEEDS[("", "", "mem_efficiency")]
    assert dropped_by(mem) == ("draft", "verify", "prefill", "draft_prefill", "reject")
    assert reaches_fallback(mem, {"draft", "verify"})   # prefill passes and rejection: the catalog's
    assert not reaches_fallback(mem, {"draft", "verify", "prefill", "draft_prefill", "reject"})
    assert dropped_by(FEEDS[("links", "host", "p2p_latency_us")]) is None   # no term times swaps
    assert reaches_fallback(FEEDS[("links", "host", "p2p_latency_us")], TERMS)
