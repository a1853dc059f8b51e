"""Which inputs of a scenario are uncertain, and their ranges: what `--intervals` draws.

An input is uncertain when its source gives it as a range: the catalog's `FIELD_range` entries,
the acceptance prior's mean, the analytic cost model's efficiencies (declared here, beside the
Scenario fields they perturb), a fitted profile's bootstrap, the model's own error on each kind of
pass (sim/model_error.py), and the seed. Only inputs that move the run are drawn: a value the
user set is theirs, and a cost input that prices only work a fitted profile prices is out
(sim/cost_inputs.py). How the draws are made and simulated: sim/uncertainty.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from psdsim.sim.catalog import Catalog
from psdsim.sim.cost_inputs import entry_roles, still_drawn
from psdsim.sim.model_error import error_ranges
from psdsim.sim.scenario import FIELDS, Scenario, catalog_for

SEED_INPUT = "seed"
SEED_SPAN = 2**31                # a draw's simulation seed is drawn from 0 .. SEED_SPAN - 1
RESAMPLE_FIELD = "profile resample"   # an input picking one of a profile term's bootstrap vectors


@dataclass(frozen=True)
class ScenarioRange:
    """A Scenario field whose default is an estimate with a range."""

    low: float
    high: float
    why: str
    applies: Callable[[Scenario], bool] = lambda s: True


# The analytic cost model's constants (sim/costs.py names their sources). Each is drawn only while
# the scenario leaves it at its default, and only where the engine prices steps with it.
SCENARIO_RANGES: dict[str, ScenarioRange] = {
    "mem_efficiency": ScenarioRange(
        0.70, 0.90, "fitted for Llama-3.1-8B on H100 (SpecDecode-Bench), not for this GPU or model"),
    "compute_efficiency": ScenarioRange(
        0.55, 0.85, "fitted for Llama-3.1-8B on H100; H200 passes near the ridge ran 17-34 % slower "
        "than the roofline (docs/engine-costs.md)"),
    "launch_overhead_us": ScenarioRange(
        40.0, 100.0, "the reference's 40-100 us eager-mode estimate, its low end used",
        lambda s: s.engine_key == "roofline"),
    "step_overhead_ms": ScenarioRange(
        0.9, 1.5, "SpecDecode-Bench's fitted per-step cost, one fit [EST]",
        lambda s: s.engine_key == "roofline"),
}


# The catalog tables whose ranges price steps (a profile fitting their terms replaces them) and
# the one that shapes the workload (no profile does). "datasets" sorts before "engines", "gpus"
# and "links", so listing the workload's inputs first keeps the sorted order of the catalog ranges,
# and with it each input's column of the Latin hypercube.
WORKLOAD_TABLES = frozenset({"datasets"})
COST_TABLES = frozenset({"engines", "gpus", "links"})


@dataclass(frozen=True)
class UncertainInput:
    """One drawn input: a Scenario field (`table` empty) or a catalog number, and its range."""

    name: str
    low: float
    high: float
    why: str
    table: str = ""    # the catalog table and entry key it lives in; empty: a Scenario field
    key: str = ""      # (a profile resample: the term)
    field: str = ""    # the field it sets (of the entry, or of the Scenario)

    def value(self, u: float) -> float:
        """The input at quantile u of its (uniform) range."""
        return float(self.low + u * (self.high - self.low))

    def resample(self, u: float) -> int:
        """A profile resample input's vector index at quantile u: each of its `high` vectors
        takes an equal share of [0, 1)."""
        return min(int(self.value(u)), int(self.high) - 1)


def uncertain_inputs(s: Scenario, methods: Sequence[str]) -> list[UncertainInput]:
    """Every input of `s` (run under `methods`) that has a range and can move the run, the seed last."""
    cat = catalog_for(s)
    moves = _moves_the_run(s, methods, cat)
    inputs = [*filter(moves, _scenario_inputs(s)), *_catalog_inputs(s, cat, WORKLOAD_TABLES),
              *filter(moves, _catalog_inputs(s, cat, COST_TABLES)), *_profile_inputs(s),
              *_acceptance_input(s, cat, methods), *_model_error_inputs(s, cat, methods)]
    return [*inputs, UncertainInput(SEED_INPUT, 0.0, float(SEED_SPAN - 1),
                                    "the simulation's own noise: requests, arrivals, acceptances",
                                    field="seed")]


def _moves_the_run(s: Scenario, methods: Sequence[str], cat: Catalog) -> Callable[[UncertainInput], bool]:
    """Whether a cost input (an efficiency, an engine, link or GPU number) is still priced by the
    catalog: always without a profile; under a fitted profile, only while a StepCost call it feeds
    reaches the catalog's cost model because the profile lacks its term (sim/cost_inputs.py says
    which inputs feed which calls and which terms replace them). The workload's inputs, prompt
    lengths, are not cost inputs: a profile prices steps, it does not choose prompts."""
    if not s.profile:
        return lambda inp: True
    from psdsim.sim.profile_reader import load_profile

    fitted = frozenset(load_profile(s.profile).terms)
    roles = entry_roles(s, methods, cat)
    return lambda inp: still_drawn(roles, fitted, inp.table, inp.key, inp.field)


def _profile_inputs(s: Scenario) -> Iterable[UncertainInput]:
    """One input per term the scenario's profile carries a bootstrap of (none for a point profile)."""
    if not s.profile:
        return
    from psdsim.sim.profile_reader import load_profile

    boot = load_profile(s.profile).bootstrap
    for term, vectors in (boot.terms if boot is not None else {}).items():
        yield UncertainInput(f"profile {term}", 0.0, float(len(vectors)),
                             f"the {term} fit's uncertainty: one of {len(vectors)} bootstrap refits, "
                             "cheapest first",
                             key=term, field=RESAMPLE_FIELD)


def _model_error_inputs(s: Scenario, cat: Catalog, methods: Sequence[str]) -> Iterable[UncertainInput]:
    """The model's own error on each kind of pass the run has (sim/model_error.py): drawn from a
    fitted profile's range where its term prices the pass, else from the engine mode's."""
    from psdsim.sim.profile_reader import load_profile

    fitted = frozenset(load_profile(s.profile).terms) if s.profile else frozenset()
    engine = cat.engines[s.engine_key]
    graphs = engine.kind == "execution" and engine.cuda_graphs
    for name, r in error_ranges(s, fitted, graphs):
        if name != "draft_error" or set(methods) != {"ar"}:   # AR drafts nothing
            yield UncertainInput(name, r.low, r.high, r.why, field=name)


def _scenario_inputs(s: Scenario) -> Iterable[UncertainInput]:
    for name, r in SCENARIO_RANGES.items():
        if getattr(s, name) == FIELDS[name].default and r.applies(s):
            yield UncertainInput(name, r.low, r.high, r.why, field=name)


def _acceptance_input(s: Scenario, cat: Catalog, methods: Sequence[str]) -> Iterable[UncertainInput]:
    if s.acceptance is not None or set(methods) == {"ar"}:   # AR drafts nothing
        return
    pair = f"{s.draft} -> {s.target}"
    r = cat.ranges.get(("acceptance", pair, "alpha"))
    if r is not None:
        yield UncertainInput(f"acceptance {pair}", r.low, r.high, r.why, field="acceptance")


def _catalog_inputs(s: Scenario, cat: Catalog, tables: frozenset[str]) -> Iterable[UncertainInput]:
    """The ranges, in `tables`, of the engine profile, the links and the GPUs the scenario runs
    on and of the dataset its prompts are drawn from."""
    used = {("engines", s.engine_key), ("links", s.link), ("links", s.tp_link_key),
            ("gpus", s.gpu), ("gpus", s.drafter_gpu_key)}
    if not s.prompt_len and not s.trace:   # prompts drawn from the dataset's lengths
        used.add(("datasets", s.dataset))
    for (table, key, name), r in sorted(cat.ranges.items()):
        if table in tables and (table, key) in used:
            yield UncertainInput(f"{table}.{key}.{name}", r.low, r.high, r.why, table, key, name)
