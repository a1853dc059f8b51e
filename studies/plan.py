"""`psdsim plan`: the best configurations for a target model, a traffic and latency objectives.

For each configuration of a search space (the product of candidate GPUs, TP sizes, links, draft
models, k, m and methods), the largest sustainable request rate is found by bracketing and then
bisecting on a log scale, like Vidur-Search (docs/reference/peer_simulators.md §1.9): a rate is
*sustainable* when every objective holds at it — p99 end-to-end latency, TTFT and TPOT where
given, and always a p99 queueing delay bound (10 s unless [slo] queue_p99_ms sets it), so that an
overloaded system (whose queue grows without limit) never passes because a finite run ended
first. The search stops when the next failing rate is within `tolerance` of the last passing one,
so the found rate meets the objectives and a rate `tolerance` higher does not.

The same seed draws the same requests at every rate (Poisson arrival times scale as 1/rate),
so latency grows with rate as it should and the bisection is well posed.

Then: throughput per GPU (and per dollar, given [price] in $ per GPU-hour) at each
configuration's best rate, the Pareto front over (GPUs, rate,
p99 latency), and for each PSD configuration beside its SD twin a verdict on whether the extra
GPU pays off and in which regime, with the metric that shows it (sim/plan_verdict.py).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psdsim.sim.catalog import load_catalog
from psdsim.sim.documents import read_toml
from psdsim.sim.errors import ScenarioError
from psdsim.sim.numbers import finite
from psdsim.sim.run import simulate
from psdsim.sim.scenario import FIELDS, Scenario, load_scenario
from psdsim.sim.scenario_parse import SEE_FIELDS
from psdsim.sim.scenario_values import (
    MAX_RATE,
    MAX_SPAN_S,
    SPAN_WHY,
    arrival_span_s,
    field_example,
    least_rate,
)
from psdsim.sim.user_input import did_you_mean, unknown_table
from psdsim.studies.parallel import map_in_order
from psdsim.studies.sweep_design import MAX_POINTS, field_value

OBJECTIVES = {  # objective key in [slo] → (summary key, percentile, what it is)
    "latency_p99_ms": ("latency_ms", "p99", "p99 end-to-end latency"),
    "ttft_p99_ms": ("ttft_ms", "p99", "p99 time to first token"),
    "tpot_p99_ms": ("tpot_ms", "p99", "p99 time per output token"),
    "queue_p99_ms": ("queue_ms", "p99", "p99 queueing delay"),
}
DEFAULT_QUEUE_P99_MS = 10_000.0
# Why each objective psdsim sets by default is there, for the report that shows it.
DEFAULT_WHY = {"queue_p99_ms": "it fails a rate whose queue grows without limit, which a finite run's "
                               "latency can miss"}
# Fields a method without a draft model ignores: AR runs once whatever their values.
DRAFT_FIELDS = ("draft", "drafter_gpu", "link", "k", "extra")
SEARCH_KEYS = ("rate_min", "rate_max", "tolerance", "requests")
TABLES = ("base", "space", "slo", "search", "price")


@dataclass(frozen=True)
class PlanSpec:
    base: Scenario
    space: dict[str, list[Any]]
    objectives: dict[str, float]
    rate_min: float = 0.05
    rate_max: float = 1000.0
    tolerance: float = 0.05
    price: dict[str, float] = field(default_factory=dict)   # GPU catalog key -> $ per GPU-hour
    defaults: frozenset[str] = frozenset()   # objectives the plan file did not set (psdsim's defaults)


def _bad(field_name: str, problem: str, fix: str) -> ScenarioError:
    return ScenarioError(field_name, problem, fix)


def load_plan(path: str | Path, overrides: Sequence[str] = ()) -> PlanSpec:
    """Read a plan file: [base] scenario fields, [space] candidate lists, [slo] objectives,
    optional [search] (rate_min, rate_max, tolerance, requests)."""
    p = Path(path)
    doc = read_toml(p, "plan", "a plan TOML file")[1]
    for key in doc:
        if key not in TABLES:
            raise unknown_table(key, TABLES, p.name, "use [base], [space], [slo], [search] and [price]")
        if not isinstance(doc[key], dict):
            raise _bad(key, f"must be a table, got {doc[key]!r}",
                       f"write [{key}] and its keys on the lines below")
    base_fields = dict(doc.get("base", {}))
    search = dict(doc.get("search", {}))
    for key in search:
        if key not in SEARCH_KEYS:
            raise _bad(f"search.{key}", "unknown key",
                       did_you_mean(key, SEARCH_KEYS, f"use {', '.join(SEARCH_KEYS)}"))
    if "requests" in search:
        base_fields["requests"] = search.pop("requests")
    base = _base_scenario(p, base_fields, overrides)
    space = _space(doc.get("space", {}), p.parent)
    slo = doc.get("slo", {})
    objectives = _objectives(slo)
    for key, value in search.items():
        if finite(value) is None:
            raise _bad(f"search.{key}", f"must be a finite number, got {value!r}", f"write e.g. {key} = 0.05")
    spec = PlanSpec(base, space, objectives, **{k: float(v) for k, v in search.items()},
                    price=_prices(doc.get("price", {}), load_catalog(base.catalog or None).gpus),
                    defaults=frozenset(objectives) - frozenset(slo))
    if not 0 < spec.rate_min < spec.rate_max:
        raise _bad("search.rate_min", f"need 0 < rate_min < rate_max, got {spec.rate_min}, {spec.rate_max}",
                   "set e.g. rate_min = 0.05 and rate_max = 1000")
    _check_rate_bounds(spec)
    if not 0.001 <= spec.tolerance <= 0.5:
        raise _bad("search.tolerance", f"must be in [0.001, 0.5], got {spec.tolerance}",
                   "set tolerance = 0.05 (5%)")
    return spec


def _check_rate_bounds(spec: PlanSpec) -> None:
    """The search tries rates anywhere between rate_min and rate_max, each a run's `rate`: refuse
    bounds no run takes here, naming them, rather than the `rate` of one run midway through."""
    if spec.rate_max > MAX_RATE:
        raise _bad("search.rate_max", f"{spec.rate_max:g} is past {MAX_RATE:g} requests a second, "
                   "the most a run takes", f"set rate_max to at most {MAX_RATE:g}")
    requests = max([spec.base.requests, *spec.space.get("requests", [])])
    span = arrival_span_s(requests, spec.rate_min)
    if span > MAX_SPAN_S:
        raise _bad("search.rate_min", f"{requests:,} requests at {spec.rate_min:g} a second may arrive "
                   f"over {span:.3g} s, past the {MAX_SPAN_S:g} s a run's clock resolves",
                   f"set rate_min to at least {least_rate(requests)}")


def _base_scenario(p: Path, fields_: dict[str, Any], overrides: Sequence[str]) -> Scenario:
    if "rate" in fields_:
        raise _bad("base.rate", "the plan searches the rate", "remove rate from [base]")
    # Typed as sweep files are (paths resolved against the plan), then written as --set values so
    # that scenario validation applies; an unknown name is left to --set's own error.
    typed = {k: field_value(k, v, "base", p.parent) if k in FIELDS else v for k, v in fields_.items()}
    return load_scenario(None, [*(f"{k}={_as_set(v)}" for k, v in typed.items()), *overrides, "rate=1.0"])


def _as_set(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "none" if value is None else str(value)


def _space(table: Mapping[str, Any], spec_dir: Path) -> dict[str, list[Any]]:
    space = {}
    for name, values in table.items():
        if name not in FIELDS:
            raise _bad(f"space.{name}", "unknown scenario field", did_you_mean(name, FIELDS, SEE_FIELDS))
        if name == "rate":
            raise _bad("space.rate", "the plan searches the rate", "remove rate from [space]")
        if not isinstance(values, list) or not values:
            raise _bad(f"space.{name}", "must be a non-empty list of candidates",
                       f"write e.g. {name} = [{field_example(FIELDS[name])}]")
        space[name] = [field_value(name, v, "space", spec_dir) for v in values]
    size = math.prod(len(v) for v in space.values())
    if size > MAX_POINTS:   # each configuration is a search of several runs: refuse, do not grind
        raise _bad("space", f"{size:,} combinations, more than {MAX_POINTS:,}",
                   "narrow the [space] lists, or split the plan into several files")
    return space


def _prices(table: Mapping[str, Any], gpus: Mapping[str, Any]) -> dict[str, float]:
    """[price]: dollars per GPU-hour by GPU catalog key (your prices: psdsim ships none)."""
    out = {}
    for gpu, value in table.items():
        if gpu not in gpus:
            raise _bad(f"price.{gpu}", "no such GPU in the catalog", f"use catalog keys ({', '.join(gpus)})")
        number = finite(value)
        if number is None or number <= 0:
            raise _bad(f"price.{gpu}", f"must be a positive $ per GPU-hour, got {value!r}",
                       f"write {gpu} = 2.5")
        out[gpu] = float(value)
    return out


def _objectives(table: Mapping[str, Any]) -> dict[str, float]:
    out = {}
    for key, value in table.items():
        if key not in OBJECTIVES:
            raise _bad(f"slo.{key}", "unknown objective",
                       did_you_mean(key, OBJECTIVES, f"use {', '.join(OBJECTIVES)}"))
        number = finite(value)
        if number is None or number <= 0:
            raise _bad(f"slo.{key}", f"must be a positive number of ms, got {value!r}", f"write {key} = 2000")
        if number > MAX_SPAN_S * 1e3:   # no run's latency can reach it: an objective that never binds
            raise _bad(f"slo.{key}", f"{number:g} ms is past {SPAN_WHY}",
                       f"write {key} of at most {MAX_SPAN_S * 1e3:g}, or remove it")
        out[key] = float(value)
    if not any(k != "queue_p99_ms" for k in out):
        raise _bad("slo", "no latency objective", "give at least one of latency_p99_ms, ttft_p99_ms, "
                                                  "tpot_p99_ms in [slo]")
    out.setdefault("queue_p99_ms", DEFAULT_QUEUE_P99_MS)
    return out


def configurations(spec: PlanSpec) -> tuple[list[Scenario], list[tuple[dict[str, Any], str]]]:
    """The valid configurations of the space (AR once per draft-free combination), and the
    invalid combinations with the reason."""
    names = list(spec.space)
    valid: list[Scenario] = []
    invalid: list[tuple[dict[str, Any], str]] = []
    seen: set[str] = set()
    for values in itertools.product(*(spec.space[n] for n in names)):
        changes = dict(zip(names, values, strict=True))
        if changes.get("method", spec.base.method) == "ar":
            changes = {k: v for k, v in changes.items() if k not in DRAFT_FIELDS}
        key = repr(sorted(changes.items()))
        if key in seen:
            continue
        seen.add(key)
        try:
            valid.append(spec.base.replace(**changes))
        except ScenarioError as exc:
            invalid.append((changes, str(exc)))
    return valid, invalid


def violations(summary: Mapping[str, Any], objectives: Mapping[str, float],
               defaults: Collection[str] = ()) -> list[str]:
    """The objectives a run misses, each with its measured value: 'p99 TTFT 2,310 ms > 2,000'; one
    the plan file did not set (in `defaults`) says so, since the reader never asked for it."""
    if not summary.get("fits"):
        reason = str(summary.get("infeasible_reason") or "does not fit")
        return [reason if reason.startswith("does not fit") else f"does not fit: {reason}"]
    out = []
    for key, limit in objectives.items():
        metric, pct, what = OBJECTIVES[key]
        value = (summary.get(metric) or {}).get(pct)
        if value is None or value > limit:
            shown = "n/a" if value is None else f"{value:,.0f} ms"
            out.append(f"{what} {shown} > {limit:,.0f} ms" + (" (default)" if key in defaults else ""))
    return out


@dataclass
class RateSearch:
    """The bracket a search ended with, and every run it made (rate → summary)."""

    rate: float | None                   # largest passing rate (None: even rate_min fails)
    failing_rate: float | None           # smallest failing rate (None: rate_max passes)
    summary: dict[str, Any] | None       # at `rate`
    failing: list[str]                   # what failed at `failing_rate`
    runs: dict[float, dict[str, Any]] = field(default_factory=dict)


def _first_guess(offline: dict[str, Any], rate_min: float, rate_max: float) -> float:
    """Half the offline capacity (requests over the offline makespan), within the search's
    bounds; a run that took no time (no step ran: every request refused) names no capacity, so
    the search starts at the top."""
    makespan = offline["makespan_s"]
    if makespan <= 0:
        return rate_max
    return min(max(offline["requests"] / makespan / 2, rate_min), rate_max)


def max_rate(s: Scenario, objectives: Mapping[str, float], *, rate_min: float = 0.05,
             rate_max: float = 1000.0, tolerance: float = 0.05,
             run: Callable[[Scenario], dict[str, Any]] | None = None,
             defaults: Collection[str] = ()) -> RateSearch:
    """The largest rate in [rate_min, rate_max] at which `s` meets the objectives, to within
    `tolerance`: bracket from a first guess by doubling or halving, then bisect in log space.
    `defaults` names the objectives the plan file did not set, for the failure's text."""
    run = run or (lambda sc: simulate(sc).summary)
    runs: dict[float, dict[str, Any]] = {}

    def passes(rate: float) -> bool:
        if rate not in runs:
            runs[rate] = run(s.replace(rate=rate))
        return not violations(runs[rate], objectives)

    offline = run(s.replace(rate=None))  # capacity guess: requests over the offline makespan
    if not offline.get("fits"):
        return RateSearch(None, None, None, violations(offline, objectives, defaults), runs)
    guess = _first_guess(offline, rate_min, rate_max)
    lo: float | None = None
    hi: float | None = None
    rate = guess
    while lo is None or hi is None:
        if passes(rate):
            lo = rate
            if rate >= rate_max:
                break
            rate = min(rate * 2, rate_max)
        else:
            hi = rate
            if rate <= rate_min:
                break
            rate = max(rate / 2, rate_min)
    if lo is not None and hi is not None:
        while hi > lo * (1 + tolerance):
            mid = math.sqrt(lo * hi)
            if passes(mid):
                lo = mid
            else:
                hi = mid
    return RateSearch(lo, hi, runs[lo] if lo is not None else None,
                      violations(runs[hi], objectives, defaults) if hi is not None else [], runs)


def _search(args: tuple[Scenario, PlanSpec]) -> RateSearch:
    s, spec = args
    return max_rate(s, spec.objectives, rate_min=spec.rate_min, rate_max=spec.rate_max,
                    tolerance=spec.tolerance, defaults=spec.defaults)


def search_all(configs: Sequence[Scenario], spec: PlanSpec, workers: int = 1,
               progress: Callable[[float], None] | None = None) -> list[RateSearch]:
    """Search every configuration, in order; `workers` > 1 uses that many processes."""
    return map_in_order(_search, [(s, spec) for s in configs], workers, progress)
