"""Prediction intervals by simulation: draw the uncertain inputs, simulate every draw, summarise.

An input is uncertain when its source gives it as a range: the catalog's `FIELD_range` entries
(sim/catalog), the acceptance prior's mean, the analytic cost model's efficiencies (their ranges
are declared here, beside the Scenario fields they perturb) — and the seed, whose own noise is one
more dimension of every draw. `propagate` spreads N Latin-hypercube points (scipy.stats.qmc,
seeded by the scenario's seed, so the same scenario gives the same draws bit for bit) over those
ranges, uniformly, simulates each draw under every method asked for, and keeps the summaries.
A fitted profile (`profile`) that carries its fit's bootstrap (sim/profile_schema.py Bootstrap) adds one
input per resampled term: the draw's coordinate picks one of its coefficient vectors, whole, so
the coefficients' correlations are kept; the vectors are stored cheapest first, so the index
ranks as the term's cost does. The model's own error on each kind of pass (sim/model_error.py)
is one more input, its range the engine mode's or, where a fitted profile's term prices the pass,
the profile's. A fitted profile also takes out the cost inputs (efficiencies,
engine, link and GPU numbers) that price only work its terms price (sim/cost_inputs.py): they no
longer move the run.
Ratios between methods are taken draw by draw on the same draws, so a ratio's interval is the
ratio's own, not two intervals divided. A value a user gave in the scenario (an `acceptance`, an
efficiency other than the default) is theirs and is not drawn.

The draws reach the simulator through the scenario alone: scenario fields are replaced, catalog
numbers are written into a small catalog file of the draw's own (the user's catalog, if any, with
the drawn entries merged over it), which the scenario's `catalog` field then names, and picked
bootstrap vectors into a profile file of the draw's own, which its `profile` field names.
"""

from __future__ import annotations

import math
import re
import tempfile
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from psdsim.sim.catalog import Catalog
from psdsim.sim.cost_inputs import entry_roles, still_drawn
from psdsim.sim.errors import ScenarioError
from psdsim.sim.model_error import error_ranges
from psdsim.sim.scenario import FIELDS, Scenario, catalog_for, toml_value

LEVEL = 0.90                     # the intervals' coverage: from the 5th to the 95th percentile
QUANTILES = ((1.0 - LEVEL) / 2, 0.5, (1.0 + LEVEL) / 2)
SEED_INPUT = "seed"
RESAMPLE_FIELD = "profile resample"   # an input picking one of a profile term's bootstrap vectors
SEED_SPAN = 2**31                # a draw's simulation seed is drawn from 0 .. SEED_SPAN - 1
MAX_DRAWS = 4096
# The fewest draws a 90% interval and a ranking of inputs are quoted from: with fewer the 5th and
# 95th percentiles interpolate between the outermost two draws or past them, and chance alone
# gives |rho| near 1 (the one-in-ten threshold is 0.42 at 16 draws, past 1 below 4). Fewer draws
# print their range and rank nothing.
MIN_RANKED_DRAWS = 16


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


@dataclass(frozen=True)
class Interval:
    median: float
    low: float
    high: float

    @property
    def point(self) -> bool:
        return self.low == self.high

    def as_json(self) -> dict[str, float]:
        return {"median": self.median, "low": self.low, "high": self.high}


@dataclass(frozen=True)
class Draw:
    """One draw: the scenario to simulate and the catalog entries (TOML) it runs with."""

    scenario: Scenario
    methods: tuple[str, ...]
    catalog_toml: str
    profile_json: str = ""   # the draw's own profile (its picked bootstrap vectors); empty: the scenario's


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


def unit_points(s: Scenario, draws: int, dimensions: int) -> np.ndarray:
    """`draws` Latin-hypercube points in [0, 1)^dimensions, seeded by the scenario's seed: each
    input's range is cut into `draws` strata and every stratum drawn once, which keeps small N
    honest about the whole range."""
    from scipy.stats import qmc

    return qmc.LatinHypercube(d=dimensions, seed=s.seed).random(draws)


def make_draws(s: Scenario, methods: Sequence[str], inputs: Sequence[UncertainInput],
               points: np.ndarray) -> list[Draw]:
    """The scenario and catalog entries of each draw."""
    out = []
    for row in points:
        changes, entries = draw_changes(inputs, row)
        text = catalog_toml(s, entries) if entries else ""
        out.append(Draw(s.replace(**changes), tuple(methods), text, drawn_profile(s, inputs, row)))
    return out


def drawn_profile(s: Scenario, inputs: Sequence[UncertainInput], row: np.ndarray) -> str:
    """The profile of one draw as JSON: the scenario's with each resampled term's picked vector;
    empty when no input resamples the profile."""
    picks = {inp.key: inp.resample(u) for inp, u in zip(inputs, row, strict=True)
             if inp.field == RESAMPLE_FIELD}
    if not picks:
        return ""
    from psdsim.sim.profile_reader import load_profile

    return load_profile(s.profile).resampled(picks).to_json()


Entries = dict[tuple[str, str], dict[str, float]]   # (table, key) -> drawn fields


def draw_changes(inputs: Sequence[UncertainInput], row: np.ndarray) -> tuple[dict[str, Any], Entries]:
    """One point's scenario field changes and drawn catalog fields (a profile resample is
    neither: `drawn_profile` writes it)."""
    changes: dict[str, Any] = {}
    entries: Entries = {}
    for inp, u in zip(inputs, row, strict=True):
        if inp.field == RESAMPLE_FIELD:
            continue
        if inp.field == "seed":
            changes["seed"] = int(inp.value(u))
        elif inp.table:
            entries.setdefault((inp.table, inp.key), {})[inp.field] = inp.value(u)
        else:
            changes[inp.field or inp.name] = inp.value(u)
    return changes, entries


def _user_catalog_doc(s: Scenario) -> dict[str, Any]:
    if not s.catalog:
        return {}
    return tomllib.loads(Path(s.catalog).read_text(encoding="utf-8"))


def catalog_toml(s: Scenario, entries: Entries) -> str:
    """The scenario's catalog file (if any) with each drawn entry replaced by its full fields,
    drawn ones changed, as TOML."""
    cat = catalog_for(s)
    doc = {table: dict(tables) for table, tables in _user_catalog_doc(s).items()}
    groups = {"engines": cat.engines, "links": cat.links, "gpus": cat.gpus, "datasets": cat.datasets}
    for (table, key), values in entries.items():
        fields_ = {name: v for name, v in asdict(groups[table][key]).items() if name != "key"}
        for path, value in values.items():
            _set_path(fields_, path, value)
        doc.setdefault(table, {})[key] = fields_
    lines = []
    for table, tables in doc.items():
        for key, fields_ in tables.items():
            lines.append(f"[{table}.{toml_value(key)}]")
            lines += [f"{name} = {_inline(value)}" for name, value in fields_.items()]
    return "\n".join(lines) + "\n"


def _set_path(fields_: dict[str, Any], path: str, value: float) -> None:
    """Set a field by its path: `launch_us`, or `components.0.mu` inside a dataset's components."""
    *parents, last = path.split(".")
    target: Any = fields_
    for part in parents:
        if part.isdigit():
            target[int(part)] = dict(target[int(part)])
            target = target[int(part)]
        else:
            target[part] = list(target[part])
            target = target[part]
    target[last] = value


def _inline(value: Any) -> str:
    """A TOML value, inline tables and arrays included (a user catalog's components and ranges)."""
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{toml_value(k)} = {_inline(v)}" for k, v in value.items()) + " }"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_inline(v) for v in value) + "]"
    return toml_value(value)


def simulate_draw(draw: Draw) -> dict[str, dict[str, Any]]:
    """Each method's summary on one draw (a module-level job for the executors)."""
    from psdsim.sim.run import simulate

    with tempfile.TemporaryDirectory(prefix="psdsim-draw-") as folder:
        s, drawn = draw.scenario, dict[str, str]()
        try:   # a scenario is checked as it is made: the replaces too may refuse a drawn value
            for field_, name, text in (("catalog", "catalog.toml", draw.catalog_toml),
                                       ("profile", "profile.json", draw.profile_json)):
                if text:
                    path = Path(folder) / name
                    path.write_text(text, encoding="utf-8")
                    drawn[str(path)] = drawn_source(draw.scenario, field_)
                    s = s.replace(**{field_: str(path)})
            return {m: simulate(s.replace(method=m)).summary for m in draw.methods}
        except ScenarioError as exc:
            raise drawn_refusal(exc, drawn) from None


def drawn_source(s: Scenario, field_: str) -> str:
    """What a draw's temporary catalog or profile file was drawn from, as a refusal names it."""
    if field_ == "catalog":
        return f"{s.catalog or 'the built-in catalog'} with values drawn from its ranges"
    return f"{s.profile} with bootstrap vectors drawn from it"


def drawn_refusal(exc: ScenarioError, drawn: dict[str, str]) -> ScenarioError:
    """A draw's refusal said as one: a value the user never wrote, taken from a range (or a
    bootstrap) the user gave, and each of the draw's temporary files (`drawn`: path -> what it
    was drawn from; a catalog error quotes the file's name alone) named by its source."""
    names = {**{Path(path).name: source for path, source in drawn.items()}, **drawn}
    problem = exc.problem
    if names:   # in one pass, longest first: a source may itself hold a temporary file's name
        pattern = "|".join(re.escape(name) for name in sorted(names, key=len, reverse=True))
        problem = re.sub(pattern, lambda found: names[found.group(0)], problem)
    return ScenarioError(exc.field, f"in a draw of --intervals: {problem}",
                         f"{exc.fix}; a draw takes each input anywhere in its range: narrow the range "
                         "that value is drawn from, or run without --intervals")


@dataclass(frozen=True)
class Propagation:
    """N draws of a scenario's uncertain inputs and every method's summary on each."""

    inputs: tuple[UncertainInput, ...]
    values: np.ndarray                         # draws x inputs: each draw's input values
    summaries: tuple[dict[str, dict[str, Any]], ...]   # per draw: method -> summary

    @property
    def draws(self) -> int:
        return len(self.summaries)

    def figure(self, method: str, path: tuple[str, ...]) -> np.ndarray:
        """One summary figure over the draws (NaN where a draw does not fit or lacks it)."""
        return np.array([_number(sm[method], path) for sm in self.summaries])

    def ratio(self, a: str, b: str, path: tuple[str, ...]) -> np.ndarray:
        """a's figure over b's, draw by draw."""
        x, y = self.figure(a, path), self.figure(b, path)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(y != 0, x / y, np.nan)

    def fits(self, method: str) -> int:
        return sum(bool(sm[method]["fits"]) for sm in self.summaries)


def _number(summary: dict[str, Any], path: tuple[str, ...]) -> float:
    value: Any = summary
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return math.nan
        value = value[part]
    if not summary["fits"] or isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def numeric_paths(summary: dict[str, Any]) -> list[tuple[str, ...]]:
    """Every numeric figure of a summary: top-level numbers and those of its dicts (latency_ms.p50)."""
    out: list[tuple[str, ...]] = []
    for key, value in summary.items():
        if isinstance(value, dict):
            out += [(key, sub) for sub, v in value.items() if _is_number(v)]
        elif _is_number(value):
            out.append((key,))
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def interval(values: np.ndarray) -> Interval | None:
    """Median and 90% interval of the finite values (None when there are none); with fewer than
    MIN_RANKED_DRAWS of them, their median and range (interval_label says which)."""
    ok = values[np.isfinite(values)]
    if not ok.size:
        return None
    if ok.size < MIN_RANKED_DRAWS:
        return Interval(float(np.median(ok)), float(ok.min()), float(ok.max()))
    low, median, high = (float(q) for q in np.quantile(ok, QUANTILES))
    return Interval(median, low, high)


def interval_label(draws: int) -> str:
    """What `interval` gives over `draws` draws, as the tables' headers say it."""
    if draws < MIN_RANKED_DRAWS:
        return f"the range of the draws; a {LEVEL:.0%} interval needs --intervals {MIN_RANKED_DRAWS} or more"
    return f"{LEVEL:.0%} interval"


def intervals_head(draws: int) -> dict[str, Any]:
    """What a JSON document of intervals says of them, as the text's header does: their level
    (none below MIN_RANKED_DRAWS, where `low` and `high` are the draws' range, not percentiles),
    in words, and the design of the draws."""
    return {"draws": draws, "level": LEVEL if draws >= MIN_RANKED_DRAWS else None,
            "interval": interval_label(draws), "design": "Latin hypercube, uniform over each range"}


def check_draws(draws: int) -> None:
    if not 2 <= draws <= MAX_DRAWS:
        raise ScenarioError("--intervals", f"must be 2..{MAX_DRAWS} draws, got {draws}",
                            "write e.g. --intervals 32 (each draw is a full simulation)")
