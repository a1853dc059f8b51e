"""Sweep designs: a SPEC file's `[base]`, `[grid]` and `[sample]` tables, expanded into scenarios.

The format, table by table, is docs/studies.md ("Sweeps"). Grid and sample combine: every grid
point is run at every sample. Every draw comes from `numpy.random.default_rng(seed)`. Paths
resolve relative to the spec file. Every expanded scenario is validated before anything runs; the
first bad one ends with a one-line ScenarioError.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from psdsim.sim.documents import read_toml
from psdsim.sim.errors import ScenarioError
from psdsim.sim.presets import PRESETS
from psdsim.sim.scenario import (
    FIELDS,
    PATH_FIELDS,
    SECTIONS,
    Scenario,
    load_scenario,
    resolved_path_field,
    scenario_from_mapping,
    scenario_to_toml,
    toml_value,
    typed_field,
)
from psdsim.sim.scenario_parse import SCENARIO_TABLES
from psdsim.sim.user_input import unknown_table

TABLES = ("base", "grid", "sample")
BASE_KEYS = ("scenario", "preset")
SAMPLE_KEYS = ("method", "n", "seed", "log")
SAMPLE_METHODS = ("random", "lhs")
MAX_POINTS = 1_000_000
NONE_WORDS = ("none", "null")
# The scenario's fields in a spec's tables: flat or in the scenario's tables, except one named as a
# field too ([engine]), since a [sample] field's value may itself be an inline table
SPEC_TABLES = replace(SCENARIO_TABLES, tables=tuple(t for t in SECTIONS if t not in FIELDS))


@dataclass(frozen=True)
class Dimension:
    """One sampled field: a numeric range [lo, hi] (inclusive for ints), or a list of choices."""

    name: str
    lo: float | None = None
    hi: float | None = None
    log: bool = False
    choices: tuple[Any, ...] = ()

    def value(self, u: float) -> Any:
        """The value at the unit coordinate u in [0, 1)."""
        if self.choices:
            return self.choices[min(int(u * len(self.choices)), len(self.choices) - 1)]
        assert self.lo is not None and self.hi is not None
        integer = FIELDS[self.name].metadata["kind"] is int
        hi = self.hi + 1 if integer else self.hi  # ints: [lo, hi + 1) floored, each value equally likely
        if self.log:
            x = math.exp(math.log(self.lo) + u * (math.log(hi) - math.log(self.lo)))
        else:
            x = self.lo + u * (hi - self.lo)
        return min(math.floor(x), int(self.hi)) if integer else min(float(x), self.hi)


@dataclass(frozen=True)
class Sample:
    method: str
    n: int
    seed: int
    dims: tuple[Dimension, ...]

    def units(self) -> np.ndarray:
        """The n x d design in the unit cube."""
        return unit_design(self.method, self.n, len(self.dims), np.random.default_rng(self.seed))

    def points(self) -> list[dict[str, Any]]:
        return [{d.name: d.value(float(u)) for d, u in zip(self.dims, row, strict=True)}
                for row in self.units()]


@dataclass(frozen=True)
class Point:
    index: int                 # position in the design
    inputs: dict[str, Any]     # the swept fields' values (grid, then sample)
    scenario: Scenario
    run_id: str                # stable hash of the scenario (and of the files it names)


@dataclass(frozen=True)
class Design:
    path: Path
    text: str                  # the spec file as written
    grid: dict[str, list[Any]]
    sample: Sample | None
    base: dict[str, Any]       # the [base] scenario's field values

    @property
    def swept(self) -> list[str]:
        return [*self.grid, *(d.name for d in self.sample.dims)] if self.sample else list(self.grid)

    @cached_property
    def samples(self) -> list[dict[str, Any]]:
        """The sampled fields' values of each sample (one empty sample without [sample])."""
        return self.sample.points() if self.sample else [{}]

    @property
    def size(self) -> int:
        """How many design points, counted without building them: grid points x samples."""
        return math.prod(len(v) for v in self.grid.values()) * (self.sample.n if self.sample else 1)

    @property
    def distinct(self) -> int:
        """How many distinct runs, counted without building them. A point's scenario is the base
        with its swept values (validation leaves a scenario unchanged) and a run id hashes the
        scenario's TOML, so two points are one run exactly when their swept values write the same
        TOML: the product of each axis's distinct values, times the distinct samples."""
        grid = math.prod(len({toml_value(v) for v in values}) for values in self.grid.values())
        return grid * len({tuple(map(toml_value, drawn.values())) for drawn in self.samples})

    @cached_property
    def points(self) -> list[Point]:
        """Every design point, each scenario built and validated (the first bad one ends with a
        one-line ScenarioError naming the point)."""
        run_id = _Hasher()
        points: list[Point] = []
        for combo in itertools.product(*self.grid.values()):
            for drawn in self.samples:
                inputs = {**dict(zip(self.grid, combo, strict=True)), **drawn}
                s = _scenario(self.base, inputs, self.path.name, _at(len(points), self.size, inputs))
                points.append(Point(len(points), inputs, s, run_id(s)))
        return points

    @cached_property
    def runs(self) -> list[Point]:
        """One point per distinct run, in design order (duplicate design points run once)."""
        seen: dict[str, Point] = {}
        for p in self.points:
            seen.setdefault(p.run_id, p)
        return list(seen.values())

    @cached_property
    def digest(self) -> str:
        """What identifies the sweep: its runs, in order (not the spec's comments or layout)."""
        return hashlib.sha256("\n".join(p.run_id for p in self.points).encode()).hexdigest()[:16]


def unit_design(method: str, n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """n points in [0, 1)^d: i.i.d. uniform, or a Latin hypercube (each of the n equal strata of
    every dimension holds exactly one point, jittered uniformly within it)."""
    if method == "random":
        return rng.random((n, d))
    u = np.empty((n, d))
    for j in range(d):
        u[:, j] = (rng.permutation(n) + rng.random(n)) / n
    return u


def _bad(name: str, problem: str, fix: str) -> ScenarioError:
    return ScenarioError(name, problem, fix)


def field_value(name: str, value: Any, where: str, spec_dir: Path) -> Any:
    """One field value of a spec file (`where`: its table), type-checked as the scenario's field
    is typed ("3" is no integer); "none" for an optional field; paths resolved against spec_dir.
    Sweep and plan files both read their fields through this."""
    meta = FIELDS[name].metadata
    if meta["optional"] and isinstance(value, str) and value.lower() in NONE_WORDS:
        return None
    try:
        value = typed_field(FIELDS[name], value)
        if name in PATH_FIELDS and value:
            value = str(resolved_path_field(name, spec_dir / value))
    except ScenarioError as exc:
        raise _bad(f"{where}.{name}", exc.problem, exc.fix) from None
    return value


def _base(doc: Any, spec: Path) -> dict[str, Any]:
    if isinstance(doc, str):
        doc = {"scenario": doc}
    if not isinstance(doc, dict):
        raise _bad("base", f"must be a table of scenario fields or a scenario file name, got {doc!r}",
                   'write [base] with fields, or base = "scenario.toml"')
    file, preset = doc.get("scenario"), doc.get("preset")
    if file is not None and not isinstance(file, str):
        raise _bad("base.scenario", f"must be a file name, got {file!r}", 'write scenario = "my.toml"')
    if preset is not None and (not isinstance(preset, str) or preset not in PRESETS):
        raise _bad("base.preset", f"unknown preset {preset!r}", f"use one of: {', '.join(PRESETS)}")
    fields = {n: field_value(n, v, "base", spec.parent)
              for n, v in SPEC_TABLES.flatten(doc, spec.name, "base", BASE_KEYS)}
    values = asdict(load_scenario(spec.parent / file if file else None, preset=preset))
    if not file and not preset:
        values["name"] = spec.stem
    values.update(fields)
    return values


def _grid(doc: Any, spec: Path) -> dict[str, list[Any]]:
    if not isinstance(doc, dict):
        raise _bad("grid", "must be a table of field = [values]", "write [grid] then e.g. k = [2, 3, 4]")
    grid: dict[str, list[Any]] = {}
    for name, values in SPEC_TABLES.flatten(doc, spec.name, "grid"):
        if not isinstance(values, list) or not values:
            listed = "the values to sweep" if isinstance(values, list | dict) else toml_value(values)
            raise _bad(f"grid.{name}", f"must be a non-empty list of values, got {values!r}",
                       f"write {name} = [{listed}] or move {name} to [base]")
        grid[name] = [field_value(name, v, "grid", spec.parent) for v in values]
    return grid


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _dimension(name: str, value: Any, log: bool, spec_dir: Path) -> Dimension:
    kind = FIELDS[name].metadata["kind"]
    where = f"sample.{name}"
    if isinstance(value, dict):
        extra = set(value) - {"range", "choices", "log"}
        if extra or ("range" in value) == ("choices" in value):
            raise _bad(where, "an inline table needs exactly one of range or choices (and maybe log)",
                       f"write {name} = {{ choices = [...] }} or {name} = {{ range = [lo, hi] }}")
        flag = value.get("log", False)
        if not isinstance(flag, bool):
            raise _bad(f"{where}.log", f"must be true or false, got {flag!r}", "write log = true, unquoted")
        log = log or flag
        if "choices" in value:
            return _choices(name, value["choices"], log, spec_dir)
        value = value["range"]
        if kind not in (int, float):
            raise _bad(where, f"{name} is not numeric, it takes choices, not a range",
                       f"write {name} = {{ choices = [...] }}")
        if not (isinstance(value, list) and len(value) == 2 and all(map(_number, value))):
            raise _bad(where, f"range must be [lo, hi], got {value!r}",
                       f"write {name} = {{ range = [1, 8] }}")
    if not isinstance(value, list) or not value:
        raise _bad(where, f"must be a range [lo, hi] or a non-empty list of choices, got {value!r}",
                   f"write {name} = [lo, hi] or move {name} to [base]")
    if not (kind in (int, float) and len(value) == 2 and all(map(_number, value))):
        return _choices(name, value, log, spec_dir)
    lo, hi = value
    if kind is int and not (isinstance(lo, int) and isinstance(hi, int)):
        raise _bad(where, f"{name} is an integer field, its range must be integers, got {value!r}",
                   f"write {name} = [{math.ceil(lo)}, {math.floor(hi)}]")
    if not lo < hi:
        raise _bad(where, f"range must have lo < hi, got {value!r}",
                   f"write {name} = [{hi}, {lo}], or a constant in [base]")
    if log and lo <= 0:
        raise _bad(where, f"a log range needs lo > 0, got {lo!r}", f"raise lo or remove {name} from log")
    for x in (lo, hi):
        field_value(name, x, "sample", spec_dir)
    return Dimension(name, lo=float(lo) if kind is float else lo, hi=float(hi) if kind is float else hi,
                     log=log)


def _choices(name: str, values: Any, log: bool, spec_dir: Path) -> Dimension:
    if not isinstance(values, list) or not values:
        raise _bad(f"sample.{name}", f"choices must be a non-empty list, got {values!r}",
                   f"write {name} = {{ choices = [a, b] }}")
    if log:
        raise _bad(f"sample.{name}", "log applies to ranges, not to a list of choices",
                   f"remove {name} from log, or give a range [lo, hi]")
    return Dimension(name, choices=tuple(field_value(name, v, "sample", spec_dir) for v in values))


def _sample(doc: Any, spec: Path) -> Sample | None:
    if doc is None:
        return None
    if not isinstance(doc, dict):
        raise _bad("sample", "must be a table", "write [sample] with method, n, seed and field ranges")
    method = doc.get("method", "random")
    if method not in SAMPLE_METHODS:
        raise _bad("sample.method", f"unknown design {method!r}", f"use one of: {', '.join(SAMPLE_METHODS)}")
    n, seed = doc.get("n"), doc.get("seed", 0)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise _bad("sample.n", f"must be an integer >= 1, got {n!r}", "write n = 16")
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise _bad("sample.seed", f"must be an integer >= 0, got {seed!r}", "write seed = 0")
    log = doc.get("log", [])
    if not isinstance(log, list) or not all(isinstance(x, str) for x in log):
        raise _bad("sample.log", f"must be a list of field names, got {log!r}", 'write log = ["rate"]')
    dims: dict[str, Dimension] = {}
    for name, value in SPEC_TABLES.flatten(doc, spec.name, "sample", SAMPLE_KEYS):
        dims[name] = _dimension(name, value, name in log, spec.parent)
    for name in log:
        if name not in dims:
            raise _bad("sample.log", f"{name!r} is not a sampled field",
                       f"add a range for {name} or remove it from log")
    if not dims:
        raise _bad("sample", "has no fields to sample", "add e.g. rate = [0.5, 8.0], or remove [sample]")
    return Sample(method, n, seed, tuple(dims.values()))


class _Hasher:
    """run ids: the scenario's TOML, plus the content of the files it names (trace, catalog,
    profile), so an edited trace is a new run."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}

    def file(self, path: str) -> str:
        if path not in self.files:
            try:
                self.files[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            except OSError:
                self.files[path] = "unreadable"
        return self.files[path]

    def __call__(self, s: Scenario) -> str:
        h = hashlib.sha256(scenario_to_toml(s).encode())
        for name in PATH_FIELDS:
            if getattr(s, name):
                h.update(f"\n{name}:{self.file(getattr(s, name))}".encode())
        return h.hexdigest()[:16]


def _describe(inputs: Mapping[str, Any]) -> str:
    text = ", ".join(f"{k}={v!r}" for k, v in inputs.items())
    return text if len(text) <= 100 else text[:97] + "..."


def load_design(path: str | Path, expand: bool = True) -> Design:
    """Read and validate a sweep SPEC: each grid value first, then (`expand`) every point, all
    before anything runs; without `expand` the points are built when first asked for."""
    p = Path(path)
    text, doc = read_toml(p, "spec", "a sweep SPEC.toml")
    for key in doc:
        if key not in TABLES:
            raise unknown_table(key, TABLES, p.name, "use [base], [grid] and [sample]")
    base_values = _base(doc.get("base", {}), p)
    grid = _grid(doc.get("grid", {}), p)
    sample = _sample(doc.get("sample"), p)
    if sample is not None:
        for d in sample.dims:
            if d.name in grid:
                raise _bad(f"sample.{d.name}", "is also in [grid]",
                           f"keep {d.name} in one of [grid] and [sample]")
    design = Design(p, text, grid, sample, base_values)
    _check_size(design)
    _check_axes(design)
    if expand:
        design.points   # noqa: B018  (builds and validates every point now)
    return design


def _check_size(design: Design) -> None:
    """Refuse more than MAX_POINTS points, naming what makes them: the grid's values, the
    sample's n, or both multiplied."""
    if design.size <= MAX_POINTS:
        return
    problem = f"the design has {design.size:,} points (more than {MAX_POINTS:,})"
    if design.sample is None:
        raise _bad("grid", problem, "use fewer values, or a [sample] design")
    if not design.grid:
        raise _bad("sample.n", problem, f"draw at most {MAX_POINTS:,} samples")
    raise _bad("grid", f"{problem}: the grid's points times [sample] n",
               "use fewer [grid] values or a smaller [sample] n")


def _at(index: int, size: int, inputs: Mapping[str, Any]) -> str:
    return f" at design point {index + 1} of {size}" + (f" ({_describe(inputs)})" if inputs else "")


def _scenario(base: Mapping[str, Any], inputs: Mapping[str, Any], source: str, at: str) -> Scenario:
    """The scenario of one point; a ScenarioError says where it is (`at`)."""
    try:
        return scenario_from_mapping({**base, **inputs}, source)
    except ScenarioError as exc:
        raise _bad(exc.field, exc.problem + at, exc.fix) from None


def _check_axes(design: Design) -> None:
    """Check each grid value once, before the grid is expanded: a bad value on any axis is found
    at once, not where the expansion reaches it. Each check is a real design point (the value,
    the other axes' first values, the first sample), so nothing valid is refused; the error
    names the point with the checked axis first."""
    first = {name: values[0] for name, values in design.grid.items()}
    first.update(design.samples[0])
    _scenario(design.base, first, design.path.name, _at(0, design.size, first))
    stride = design.size
    for name, values in design.grid.items():
        stride //= len(values)   # design points between two values of this axis
        seen = {toml_value(values[0])}
        for j, value in enumerate(values):
            if toml_value(value) in seen:
                continue
            seen.add(toml_value(value))
            inputs = {name: value, **{k: v for k, v in first.items() if k != name}}
            _scenario(design.base, inputs, design.path.name, _at(j * stride, design.size, inputs))
