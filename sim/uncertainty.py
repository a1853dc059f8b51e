"""Prediction intervals by simulation: draw the uncertain inputs, simulate every draw, summarise.

An input is uncertain when its source gives it as a range: the catalog's `FIELD_range` entries
(sim/catalog), the acceptance prior's mean, the analytic cost model's efficiencies — and the
seed, whose own noise is one more dimension of every draw; sim/uncertain_inputs.py lists them.
`propagate` spreads N Latin-hypercube points (scipy.stats.qmc, seeded by the scenario's seed, so
the same scenario gives the same draws bit for bit) over those ranges, uniformly, simulates each
draw under every method asked for, and keeps the summaries.
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
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from psdsim.sim.errors import ScenarioError
from psdsim.sim.scenario import Scenario, catalog_for, toml_value
from psdsim.sim.uncertain_inputs import RESAMPLE_FIELD, UncertainInput

LEVEL = 0.90                     # the intervals' coverage: from the 5th to the 95th percentile
QUANTILES = ((1.0 - LEVEL) / 2, 0.5, (1.0 + LEVEL) / 2)
MAX_DRAWS = 4096
# The fewest draws a 90% interval and a ranking of inputs are quoted from: with fewer the 5th and
# 95th percentiles interpolate between the outermost two draws or past them, and chance alone
# gives |rho| near 1 (the one-in-ten threshold is 0.42 at 16 draws, past 1 below 4). Fewer draws
# print their range and rank nothing.
MIN_RANKED_DRAWS = 16


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
