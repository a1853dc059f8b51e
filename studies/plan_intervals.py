"""`psdsim plan --intervals N`: the whole plan again on N draws of its uncertain inputs, and for
each PSD configuration in how many draws its extra GPU pays, with its gain's and its rate's
intervals.

A draw is one point of the inputs of every configuration together (sim/uncertainty.py): a
configuration takes the coordinates of the inputs it has (its engine's and links' catalog ranges,
its draft pair's acceptance, the efficiencies, the seed) and the same draw's values as every other
configuration, so a PSD configuration and its SD twin are judged on the same draw and the gain is
taken draw by draw.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from psdsim.sim.errors import ScenarioError
from psdsim.sim.output.intervals import interval_text, measure_first, ranks_json, sensitivity_files
from psdsim.sim.sensitivity import METHOD, Sensitivity, noise_floor, rank_inputs
from psdsim.sim.uncertain_inputs import UncertainInput, uncertain_inputs
from psdsim.sim.uncertainty import (
    catalog_toml,
    check_draws,
    draw_changes,
    drawn_profile,
    drawn_refusal,
    drawn_source,
    interval,
    interval_label,
    intervals_head,
    unit_points,
)
from psdsim.studies.plan import PlanSpec, search_all
from psdsim.studies.plan_verdict import row, verdicts


@dataclass(frozen=True)
class PlanDraws:
    inputs: tuple[UncertainInput, ...]
    values: np.ndarray                             # draws x inputs
    verdicts: tuple[list[dict[str, Any]], ...]     # per draw, plan_verdict.verdicts' list
    own: tuple[frozenset[str], ...]                # per verdict: the inputs its configurations have

    @property
    def draws(self) -> int:
        return len(self.verdicts)

    def figure(self, verdict: int, key: str) -> np.ndarray:
        """One verdict's `key` (per_gpu_gain, psd_rate, sd_rate) over the draws, NaN where None."""
        return np.array([np.nan if d[verdict][key] is None else float(d[verdict][key])
                         for d in self.verdicts])

    def pays(self, verdict: int) -> int:
        return sum(bool(d[verdict]["pays_off"]) for d in self.verdicts)


def plan_inputs(configs: Sequence[Any]) -> list[UncertainInput]:
    """Every configuration's uncertain inputs, once each by name, the seed last."""
    found: dict[str, UncertainInput] = {}
    for c in configs:
        for inp in uncertain_inputs(c, [c.method]):
            found.setdefault(inp.name, inp)
    return sorted(found.values(), key=lambda i: (i.field == "seed", i.name))


def _drawn(c: Any, inputs: Sequence[UncertainInput], row_: np.ndarray, catalog: str, profile: Path) -> Any:
    """Configuration `c` at one draw: the draw's values of the inputs `c` has (its resampled
    profile, if any, written to `profile`)."""
    own = {i.name for i in uncertain_inputs(c, [c.method])}
    mine = [j for j, inp in enumerate(inputs) if inp.name in own]
    changes, entries = draw_changes([inputs[j] for j in mine], row_[mine])
    text = drawn_profile(c, [inputs[j] for j in mine], row_[mine])
    if text:
        profile.write_text(text, encoding="utf-8")
        changes["profile"] = str(profile)
    return c.replace(**changes, **({"catalog": catalog} if entries else {}))


def plan_draws(spec: PlanSpec, configs: Sequence[Any], draws: int, workers: int,
               progress: Callable[[float], None] | None = None) -> PlanDraws:
    """Search every configuration on every draw (one pool for all), then judge each draw."""
    check_draws(draws)
    inputs = plan_inputs(configs)
    points = unit_points(spec.base, draws, len(inputs))
    with tempfile.TemporaryDirectory(prefix="psdsim-plan-draws-") as folder:
        drawn, sources = [], {}
        try:   # a drawn value refused as its scenario is made, or in a search, named by its source
            for d, point in enumerate(points):
                path = Path(folder) / f"draw-{d}.toml"
                path.write_text(catalog_toml(spec.base, draw_changes(inputs, point)[1]), encoding="utf-8")
                sources[str(path)] = drawn_source(spec.base, "catalog")
                for i, c in enumerate(configs):
                    profile = Path(folder) / f"draw-{d}-config-{i}.json"
                    sources[str(profile)] = drawn_source(c, "profile")
                    drawn.append(_drawn(c, inputs, point, str(path), profile))
            searches = search_all(drawn, spec, workers, progress)
        except ScenarioError as exc:
            raise drawn_refusal(exc, sources) from None
    n = len(configs)
    judged, rows = [], []
    for d in range(draws):
        rows = [row(s, r, spec.price) for s, r in zip(drawn[d * n:(d + 1) * n], searches[d * n:(d + 1) * n],
                                                      strict=True)]
        judged.append(verdicts(list(configs), rows))
    values = np.array([[inp.value(u) for inp, u in zip(inputs, p, strict=True)] for p in points])
    return PlanDraws(tuple(inputs), values.reshape(draws, len(inputs)), tuple(judged),
                     _verdict_inputs(configs, rows, judged[0]))


def _verdict_inputs(configs: Sequence[Any], rows: Sequence[dict[str, Any]],
                    judged: Sequence[dict[str, Any]]) -> tuple[frozenset[str], ...]:
    """For each verdict, the names of the inputs its PSD configuration has (its SD twin, the same
    fields but the method, has the same): only those can move its gain."""
    out = []
    for v in judged:
        i = next(i for i, r in enumerate(rows)
                 if r["method"] == v["method"] and all(r[k] == x for k, x in v["config"].items()))
        out.append(frozenset(inp.name for inp in uncertain_inputs(configs[i], [configs[i].method])))
    return tuple(out)


def verdict_label(v: dict[str, Any], space: Sequence[str]) -> str:
    config = v["config"]
    return " ".join([v["method"], *(f"{k}={config[k]}" for k in space if config.get(k) is not None)])


def plan_sensitivities(pd: PlanDraws, labels: Sequence[str]) -> list[Sensitivity]:
    rows: list[Sensitivity] = []
    for v, label in enumerate(labels):
        mine = [j for j, inp in enumerate(pd.inputs) if inp.name in pd.own[v]]
        rows += rank_inputs(f"gain of {label}", pd.values[:, mine], [pd.inputs[j] for j in mine],
                            pd.figure(v, "per_gpu_gain"))
    return rows


def plan_interval_files(pd: PlanDraws, labels: Sequence[str], figures: bool) -> dict[str, str | bytes]:
    """sensitivity.csv, and the tornado of the first configuration's gain unless figures are off,
    where they rank anything."""
    rows = plan_sensitivities(pd, labels)
    return sensitivity_files(rows, "figures/sensitivity.png" if figures else None) if rows else {}


def plan_intervals_json(pd: PlanDraws, labels: Sequence[str]) -> dict[str, Any]:
    def iv(v: int, key: str) -> dict[str, float] | None:
        found = interval(pd.figure(v, key))
        return found.as_json() if found else None

    return {**intervals_head(pd.draws),
            "inputs": [{"name": i.name, "low": i.low, "high": i.high, "why": i.why} for i in pd.inputs],
            "verdicts": [{"configuration": label, "pays_in": pd.pays(v),
                          **{key: iv(v, key) for key in ("per_gpu_gain", "psd_rate", "sd_rate")}}
                         for v, label in enumerate(labels)],
            "sensitivity": {"method": METHOD, "noise_floor": noise_floor(pd.draws),
                            **ranks_json(plan_sensitivities(pd, labels))}}


def plan_interval_lines(pd: PlanDraws, labels: Sequence[str]) -> list[str]:
    """In how many draws each PSD configuration pays, its gain and both rates with intervals, and
    the input that moves the first one's gain most."""
    if not labels:   # no SD/PSD verdict pair was searched: nothing to give intervals of
        return []
    out = ["", f"  with intervals ({pd.draws} draws of {len(pd.inputs)} uncertain inputs; median "
               f"({interval_label(pd.draws)})):"]
    for v, label in enumerate(labels):
        gain = interval_text(interval(pd.figure(v, "per_gpu_gain")), 2)
        psd = interval_text(interval(pd.figure(v, "psd_rate")), 2)
        sd = interval_text(interval(pd.figure(v, "sd_rate")), 2)
        out += [f"  - {label}: pays in {pd.pays(v)} of {pd.draws} draws; gain {gain}x",
                f"      the objectives fail above {psd} req/s with PSD, {sd} with SD"]
    rows = plan_sensitivities(pd, labels)
    if rows:
        out += ["", *measure_first(rows, pd.draws)]
    return out
