"""A profile JSON read, every value checked where it is read: a wrong type, a value outside its
term's sign or magnitude or an unknown key is one error naming its JSON path, never clamped or
ignored. A profile built in code meets the same bounds on its coefficients (check_coefficients)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from psdsim.sim.documents import DuplicateKey, load_json, parse_document
from psdsim.sim.errors import ScenarioError
from psdsim.sim.numbers import finite
from psdsim.sim.profile_schema import (
    FEATURES,
    PROFILE_FORMAT,
    PROFILE_VERSION,
    RANGE_VARIABLES,
    TERMS,
    Bootstrap,
    Profile,
    Term,
)
from psdsim.sim.scenario import MAX_SPAN_S, path_field_file


def _bad(problem: str, path: str) -> ScenarioError:
    return ScenarioError("profile", f"{path}: {problem}",
                         "give a profile written by `psdsim calibrate … --out profile.json`")


# A coefficient is seconds per unit of its feature (a pass, a token, a cached token, a byte), and
# calibration's fit is non-negative least squares (calibration/fit.py), so no profile it writes
# has a negative one. Traces time GPU work of microseconds to seconds per pass: an hour per unit
# is no measurement but a corrupt or hand-edited file, and it keeps every priced step finite (a
# step's features stay far below 1e12 units).
MAX_COEF_S = 3600.0
COEF_WHY = " (seconds per unit: a fit is never negative, and no measured unit takes an hour)"
# Contention and after-idle factors are ratios of two timings of the same work on the same
# hardware (engine/validate/contention.py: concurrent or after idling, over alone back to back).
# Slowdowns, but a measured median does come out under 1: 0.92 in tests/data/validate_small, 0.33
# on a loaded shared machine, where other work slowed the "alone" timings. So [1, 100] would
# refuse real measurements, validate's own profiles among them; ten times faster is past any such
# noise, a corrupt file that would speed runs up as much. A hundred times slower is no slowdown of
# shared hardware either, and would scale step times out of the clock's resolution.
FACTOR_BOUNDS = (0.1, 100.0)
# Range variables are sizes of a step (batch, k, tokens, cached tokens, bytes, positions): no
# step comes near a thousand trillion of any, and a bound keeps the range warnings' figures finite.
MAX_RANGE = 1e15
# The longest idle time an after-idle point may name: the simulated clock's span (sim/scenario_values.py).
MAX_IDLE_S = MAX_SPAN_S


def _show(value: Any) -> str:
    """A value as an error shows it: JSON for a scalar (cut short), else its kind."""
    scalar = isinstance(value, bool | int | float | str | type(None))
    text = json.dumps(value) if scalar else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def _number(value: Any, where: str, path: str, low: float, high: float, why: str = "") -> float:
    """`value` as a float when it is a finite number in [low, high]; else the error that names
    its place in the document (and `why` the interval is what it is)."""
    x = finite(value)
    if x is None:
        raise _bad(f"{where}: must be a finite number in [{low:g}, {high:g}]{why}, got {_show(value)}", path)
    if not low <= x <= high:
        raise _bad(f"{where}: {x:g} is outside [{low:g}, {high:g}]{why}", path)
    return x


def _count(value: Any, where: str, path: str) -> int:
    """A non-negative integer count (JSON has no other integer here)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _bad(f"{where}: must be a whole number >= 0, got {_show(value)}", path)
    return value


def _object(value: Any, where: str, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _bad(f"{where}: must be an object, got {_show(value)}", path)
    return value


def _list(value: Any, where: str, path: str, length: int | None = None) -> list[Any]:
    if not isinstance(value, list) or (length is not None and len(value) != length):
        size = f"a list of {length}" if length is not None else "a list"
        raise _bad(f"{where}: must be {size}, got {_show(value)}", path)
    return value


def _unknown(keys: Any, known: Sequence[str], where: str, path: str) -> None:
    """A key the simulator does not read would be ignored without a word, and a misspelt one
    would leave the value it meant at its default: refused instead."""
    extra = [k for k in keys if k not in known]
    if extra:
        raise _bad(f"{where}.{extra[0]}: unknown key (known: {', '.join(known)})", path)


def _ranges(name: str, doc: Any, where: str, path: str) -> dict[str, tuple[float, float]]:
    """The [low, high] each range variable of term `name` was fitted on."""
    ranges = _object(doc, where, path)
    _unknown(ranges, RANGE_VARIABLES[name], where, path)
    out = {}
    for var, pair in ranges.items():
        lo, hi = (_number(v, f"{where}.{var}[{i}]", path, 0.0, MAX_RANGE)
                  for i, v in enumerate(_list(pair, f"{where}.{var}", path, 2)))
        if lo > hi:
            raise _bad(f"{where}.{var}: low {lo:g} above high {hi:g}", path)
        out[var] = (lo, hi)
    return out


def _term(name: str, doc: Any, path: str) -> Term:
    where = f"terms.{name}"
    if name not in FEATURES:
        raise _bad(f"{where}: unknown term (known: {', '.join(TERMS)})", path)
    doc = _object(doc, where, path)
    # A profile from an older psdsim may list fewer features (those added since count 0).
    features = doc.get("features", list(FEATURES[name]))
    if not isinstance(features, list) or not features or features != list(FEATURES[name][:len(features)]):
        raise _bad(f"{where}.features: {_show(doc.get('features'))} differ from this psdsim's "
                   f"{list(FEATURES[name])}", path)
    coef = _list(doc.get("coef"), f"{where}.coef", path, len(features))
    cv = doc.get("cv_mape")
    fixed = _list(doc.get("fixed_features", []), f"{where}.fixed_features", path)
    if not all(f in features for f in fixed):
        raise _bad(f"{where}.fixed_features: {_show(fixed)} are not all among {features}", path)
    dropped = _object(doc.get("dropped", {}), f"{where}.dropped", path)
    coefs = tuple(_number(c, f"{where}.coef[{i}]", path, 0.0, MAX_COEF_S, COEF_WHY)
                  for i, c in enumerate(coef))
    return Term(name, coefs,
                _count(doc.get("samples", 0), f"{where}.samples", path),
                math.nan if "mape" not in doc else _number(doc["mape"], f"{where}.mape", path, 0.0, math.inf),
                None if cv is None else _number(cv, f"{where}.cv_mape", path, 0.0, math.inf),
                _ranges(name, doc.get("ranges", {}), f"{where}.ranges", path),
                {k: _count(v, f"{where}.dropped.{k}", path) for k, v in dropped.items()},
                tuple(fixed))


# What calibration records of the traces' acceptance (calibration/fit.py `acceptance_stats`), and
# the interval each lies in: counts, a VSR and a per-token rate (fractions).
ACCEPTANCE_BOUNDS = {"steps": (0.0, math.inf), "k": (0.0, math.inf), "vsr": (0.0, 1.0),
                     "mean_accepted": (0.0, math.inf), "per_token": (0.0, 1.0)}
CONTENTION_KEYS = ("draft", "verify", "after_idle", "source")
SIDES = ("draft", "verify")


FACTOR_WHY = " (a slowdown of the same work: never 10 times faster, nor 100 times slower)"


def _factor(value: Any, where: str, path: str) -> float:
    return _number(value, where, path, *FACTOR_BOUNDS, FACTOR_WHY)


def _contention(doc: Any, path: str) -> dict[str, Any]:
    """The measured slowdowns (sim/overlap.py), each factor and idle point checked."""
    contention = _object(doc, "contention", path)
    _unknown(contention, CONTENTION_KEYS, "contention", path)
    for side in SIDES:
        if side in contention:
            _factor(contention[side], f"contention.{side}", path)
    idle = _object(contention.get("after_idle", {}), "contention.after_idle", path)
    _unknown(idle, SIDES, "contention.after_idle", path)
    for side, points in idle.items():
        for i, point in enumerate(_list(points, f"contention.after_idle.{side}", path)):
            at = f"contention.after_idle.{side}[{i}]"
            idle_s, factor = _list(point, at, path, 2)
            _number(idle_s, f"{at}[0]", path, 0.0, MAX_IDLE_S)
            _factor(factor, f"{at}[1]", path)
    _object(contention.get("source", {}), "contention.source", path)
    return dict(contention)


def _acceptance(doc: Any, path: str) -> dict[str, float]:
    acceptance = _object(doc, "acceptance", path)
    _unknown(acceptance, tuple(ACCEPTANCE_BOUNDS), "acceptance", path)
    return {key: _number(v, f"acceptance.{key}", path, *ACCEPTANCE_BOUNDS[key])
            for key, v in acceptance.items()}


def _notes(doc: Any, path: str) -> tuple[str, ...]:
    notes = _list(doc, "notes", path)
    for i, note in enumerate(notes):
        if not isinstance(note, str):
            raise _bad(f"notes[{i}]: must be text, got {_show(note)}", path)
    return tuple(notes)


BOOTSTRAP_KEYS = ("seed", "terms", "too_few")


def _bootstrap(doc: Any, terms: Mapping[str, Term], path: str) -> Bootstrap:
    """The fit's resampled coefficient vectors, each checked as the point coefficients are: only
    fitted terms, each vector as long as its term's coefficients, every value in [0, MAX_COEF_S]."""
    boot = _object(doc, "bootstrap", path)
    _unknown(boot, BOOTSTRAP_KEYS, "bootstrap", path)
    vectors: dict[str, tuple[tuple[float, ...], ...]] = {}
    for name, rows in _object(boot.get("terms", {}), "bootstrap.terms", path).items():
        where = f"bootstrap.terms.{name}"
        if name not in terms:
            raise _bad(f"{where}: no fitted {name} term to resample (fitted: {', '.join(terms)})", path)
        rows = _list(rows, where, path)
        if len(rows) < 2:
            raise _bad(f"{where}: must list at least 2 coefficient vectors, got {len(rows)}", path)
        width = len(terms[name].coef)
        vectors[name] = tuple(
            tuple(_number(c, f"{where}[{i}][{j}]", path, 0.0, MAX_COEF_S, COEF_WHY)
                  for j, c in enumerate(_list(row, f"{where}[{i}]", path, width)))
            for i, row in enumerate(rows))
    too_few = _object(boot.get("too_few", {}), "bootstrap.too_few", path)
    _unknown(too_few, TERMS, "bootstrap.too_few", path)
    return Bootstrap(_count(boot.get("seed", 0), "bootstrap.seed", path), vectors,
                     {name: _count(n, f"bootstrap.too_few.{name}", path) for name, n in too_few.items()})


def profile_from_json(text: str, path: str = "profile") -> Profile:
    """The profile in `text`, every value checked where it is read: a wrong type, a value
    outside its term's sign or magnitude (see MAX_COEF_S and FACTOR_BOUNDS) or an unknown key is
    an error naming its JSON path (`terms.verify.coef[1]`), never clamped or ignored."""
    try:
        doc = parse_document(load_json, text, "profile", path)
    except json.JSONDecodeError as exc:
        raise _bad(f"not JSON ({exc.msg} at line {exc.lineno})", path) from None
    except DuplicateKey as exc:
        raise _bad(f"key {exc.key!r} given twice (which value is meant?); keep one of the two",
                   path) from None
    if not isinstance(doc, dict) or doc.get("format") != PROFILE_FORMAT:
        raise _bad(f"not a psdsim profile (no \"format\": \"{PROFILE_FORMAT}\")", path)
    if doc.get("version") != PROFILE_VERSION:
        raise _bad(f"profile version {doc.get('version')!r}; this psdsim reads version {PROFILE_VERSION}",
                   path)
    terms = doc.get("terms")
    if not isinstance(terms, dict) or not terms:
        raise _bad("no fitted terms", path)
    fitted = {name: _term(name, t, path) for name, t in terms.items()}
    return Profile(fitted, dict(_object(doc.get("source", {}), "source", path)),
                   _acceptance(doc.get("acceptance", {}), path), _notes(doc.get("notes", []), path),
                   _contention(doc.get("contention", {}), path),
                   None if "bootstrap" not in doc else _bootstrap(doc["bootstrap"], fitted, path))


def load_profile(path: str | Path) -> Profile:
    p = Path(path)
    path_field_file("profile", p)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _bad(f"cannot read it ({exc.__class__.__name__})", str(p)) from None
    return profile_from_json(text, str(p))


def check_coefficients(profile: Profile) -> None:
    """Every coefficient in [0, MAX_COEF_S], as the reader requires of a file, for profiles built
    in code too: with them and the simulator's sizes (never negative) every feature is >= 0, so
    every priced time is >= 0 and finite, and no price needs clamping."""
    for term in profile.terms.values():
        for i, c in enumerate(term.coef):
            _number(c, f"terms.{term.name}.coef[{i}]", "the profile given to FittedCost", 0.0, MAX_COEF_S,
                    COEF_WHY)
