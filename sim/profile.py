"""Fitted cost profiles: the schema `calibration/` writes and the StepCost the simulator runs on.

A profile holds, per kind of work (a *term*), coefficients of the same terms the analytic model
adds up (docs/design.md §3), fitted to trace samples by calibration. Each term is linear in its features:

    draft(batch, k, ctx)    = c·(k,  k·batch,  k·ctx + batch·k(k-1)/2,  1)  k passes; cached tokens;
                                                                         and once per drafting call
    verify(batch, tok, ctx) = c·(1,  tokens,   ctx)                         one target pass
    prefill(tok, pairs, ctx)= c·(1,  tokens,   pairs,  ctx)                 a prompt pass (target)
    draft_prefill           = the same, on the draft model
    comm / broadcast(bytes) = c·(1,  bytes)                                 one message
    reject(positions)       = c·(1,  positions)
    overhead                = c·(1,)                                        per engine step

In the memory-bound regime of decoding the roofline is exactly this linear form (weight read per
pass + KV read per cached token); where a step turns compute-bound the fit is an approximation and
its error says how good. A pass that carries decodes and prefill chunks together is priced as the
decode pass plus the prefill term without its fixed part (they share one weight read).

A transfer is priced message by message (sim/messages.py): under `transfers = "per-tensor"` each
tensor of MineDraft's broadcast and return pays comm's or broadcast's fixed part; a profile fitted
on an engine that sends one message each way (the reference engine) is meant for
`transfers = "one-message"`, which `psdsim validate` sets.

Terms a profile lacks (a trace without transfers, say) fall back to the analytic model; the run's
warnings say which. A run that takes a term outside the ranges it was fitted on warns too.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from psdsim.sim.costs import NO_CHUNKS, Chunks, OptionalCosts, StepCost, complete
from psdsim.sim.documents import DuplicateKey, load_json, parse_document
from psdsim.sim.errors import ScenarioError
from psdsim.sim.layout import DEDICATED, layout_for
from psdsim.sim.numbers import finite
from psdsim.sim.overlap import idle_factor
from psdsim.sim.scenario import MAX_SPAN_S, catalog_for, path_field_file

PROFILE_FORMAT = "psdsim-profile"
PROFILE_VERSION = 1

FEATURES: dict[str, tuple[str, ...]] = {
    "draft": ("passes", "pass_tokens", "pass_ctx", "call"),
    "verify": ("pass", "tokens", "ctx"),
    "prefill": ("pass", "tokens", "pairs", "ctx"),
    "draft_prefill": ("pass", "tokens", "pairs", "ctx"),
    "comm": ("message", "bytes"),
    "broadcast": ("message", "bytes"),
    "reject": ("call", "positions"),
    "overhead": ("step",),
}
TERMS = tuple(FEATURES)
# The quantities whose fitted range a run is checked against, per term.
RANGE_VARIABLES: dict[str, tuple[str, ...]] = {
    "draft": ("batch", "k", "ctx"),
    "verify": ("batch", "tokens", "ctx"),
    "prefill": ("tokens",),
    "draft_prefill": ("tokens",),
    "comm": ("bytes",),
    "broadcast": ("bytes",),
    "reject": ("positions",),
    "overhead": (),
}


def draft_features(batch: float, k: float, ctx: float) -> tuple[float, float, float, float]:
    """k autoregressive passes of `batch` tokens; pass j reads ctx + j*batch cached tokens; and
    what a drafting call costs once whatever its k (an engine's per-call work: preparing the
    batch, collecting the drafts; the first pass feeding the tokens the draft cache lacks)."""
    return (k, k * batch, k * ctx + batch * k * (k - 1) / 2, 1.0)


def verify_features(tokens: float, ctx: float) -> tuple[float, float, float]:
    return (1.0, tokens, ctx)


def prefill_features(tokens: float, pairs: float, ctx: float) -> tuple[float, float, float, float]:
    return (1.0, tokens, pairs, ctx)


def message_features(nbytes: float) -> tuple[float, float]:
    return (1.0, nbytes)


@dataclass(frozen=True)
class Term:
    """One fitted term: coefficients over FEATURES[name] (seconds per unit), how well they fit
    (in-sample and cross-validated mean absolute percentage error), and the fitted ranges."""

    name: str
    coef: tuple[float, ...]
    samples: int
    mape: float
    cv_mape: float | None
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    dropped: Mapping[str, int] = field(default_factory=dict)
    fixed_features: tuple[str, ...] = ()   # features the samples could not identify (coef 0)

    def __call__(self, features: Sequence[float]) -> float:
        # A profile written before a feature was added has no coefficient for it: 0.
        return sum(c * x for c, x in zip(self.coef, features, strict=False))


@dataclass(frozen=True)
class Bootstrap:
    """A fit's uncertainty: per term, coefficient vectors refitted to resamples of its samples
    (calibration/fit.py `bootstrap_term`), cheapest first; and the terms with too few samples to
    resample, with their counts. --intervals draws one whole vector per term (sim/uncertainty.py)."""

    seed: int
    terms: Mapping[str, tuple[tuple[float, ...], ...]]
    too_few: Mapping[str, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"seed": self.seed, "terms": {name: [list(v) for v in vectors]
                                             for name, vectors in self.terms.items()},
                "too_few": dict(self.too_few)}


@dataclass(frozen=True)
class Profile:
    """A fitted cost profile and where it came from (traces with their hashes, engine, hardware)."""

    terms: Mapping[str, Term]
    source: Mapping[str, Any] = field(default_factory=dict)
    acceptance: Mapping[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    # Measured slowdown of drafting and of a target pass while the other runs, and of each side's
    # work after it idled (sim/overlap.py): {"draft": f, "verify": f, "after_idle": {"draft":
    # [[idle_s, f], ...], "verify": [...]}, "source": {...how it was measured}}; empty = none.
    contention: Mapping[str, Any] = field(default_factory=dict)
    bootstrap: Bootstrap | None = None   # None: a point profile (calibrated before bootstraps, or by hand)

    def resampled(self, picks: Mapping[str, int]) -> Profile:
        """The point profile with each picked term's coefficients replaced by its bootstrap
        vector number `picks[term]`: one draw of the fit's uncertainty, itself a point."""
        assert self.bootstrap is not None
        terms = {name: replace(t, coef=self.bootstrap.terms[name][picks[name]]) if name in picks else t
                 for name, t in self.terms.items()}
        return replace(self, terms=terms, bootstrap=None)

    @property
    def contention_factors(self) -> tuple[float, float]:
        """(draft, verify) slowdown factors while overlapped; (1, 1) when not measured."""
        return (float(self.contention.get("draft", 1.0)), float(self.contention.get("verify", 1.0)))

    def idle_points(self, side: str) -> tuple[tuple[float, float], ...]:
        """(idle seconds, slowdown) points of `side` ("draft" or "verify"), ascending; () = none."""
        points = self.contention.get("after_idle", {}).get(side, ())
        return tuple(sorted((float(x), float(y)) for x, y in points))

    def to_json(self) -> str:
        doc = {
            "format": PROFILE_FORMAT,
            "version": PROFILE_VERSION,
            "source": dict(self.source),
            "terms": {name: {
                "features": list(FEATURES[name][:len(t.coef)]),
                "coef": list(t.coef),
                "samples": t.samples,
                "mape": t.mape,
                "cv_mape": t.cv_mape,
                "ranges": {k: list(v) for k, v in t.ranges.items()},
                "dropped": dict(t.dropped),
                "fixed_features": list(t.fixed_features),
            } for name, t in self.terms.items()},
            "acceptance": dict(self.acceptance),
            "notes": list(self.notes),
        }
        if self.contention:
            doc["contention"] = dict(self.contention)
        if self.bootstrap is not None:
            doc["bootstrap"] = self.bootstrap.as_json()
        return json.dumps(doc, indent=2, allow_nan=False) + "\n"


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
# The longest idle time an after-idle point may name: the simulated clock's span (sim/scenario.py).
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


class _Seen:
    """Lowest and highest value of each range variable a term was asked for during a run."""

    __slots__ = ("hi", "lo")

    def __init__(self, n: int) -> None:
        self.lo = [math.inf] * n
        self.hi = [-math.inf] * n

    def add(self, *values: float) -> None:
        lo, hi = self.lo, self.hi
        for i, v in enumerate(values):
            if v < lo[i]:
                lo[i] = v
            if v > hi[i]:
                hi[i] = v


@contextmanager
def unrecorded(cost: StepCost) -> Iterator[None]:
    """Prices asked inside do not count as sizes the run used (a fitted profile's range
    warnings): what-if pricing, such as adaptive k's candidates."""
    if not isinstance(cost, FittedCost):
        yield
        return
    cost.recording = False
    try:
        yield
    finally:
        cost.recording = True


def _check_coefficients(profile: Profile) -> None:
    """Every coefficient in [0, MAX_COEF_S], as the reader requires of a file, for profiles built
    in code too: with them and the simulator's sizes (never negative) every feature is >= 0, so
    every priced time is >= 0 and finite, and no price needs clamping."""
    for term in profile.terms.values():
        for i, c in enumerate(term.coef):
            _number(c, f"terms.{term.name}.coef[{i}]", "the profile given to FittedCost", 0.0, MAX_COEF_S,
                    COEF_WHY)


class FittedCost(OptionalCosts):
    """A StepCost from a profile: fitted terms where the profile has them, `fallback` elsewhere."""

    def __init__(self, profile: Profile, fallback: StepCost) -> None:
        self.profile = profile
        self.fallback = complete(fallback)
        t = profile.terms
        self._draft, self._verify = t.get("draft"), t.get("verify")
        self._prefill, self._draft_prefill = t.get("prefill"), t.get("draft_prefill")
        self._comm, self._broadcast, self._reject = t.get("comm"), t.get("broadcast"), t.get("reject")
        _check_coefficients(profile)
        self.overhead = t["overhead"].coef[0] if "overhead" in t else fallback.overhead
        self.contention = profile.contention_factors
        self._idle = {side: profile.idle_points(side) for side in ("draft", "verify")}
        self.seen = {name: _Seen(len(RANGE_VARIABLES[name])) for name in TERMS}
        self.recording = True   # off while pricing what-ifs (see `unrecorded`)

    def _saw(self, name: str, *values: float) -> None:
        if self.recording:
            self.seen[name].add(*values)

    def after_idle(self, side: str, idle_s: float) -> float:
        """How much slower `side`'s work runs after it idled `idle_s` (1 when not measured)."""
        return idle_factor(self._idle[side], idle_s)

    def framework(self, running: int, emitting: int) -> float:
        """Per-step framework work: the fitted overhead where the profile has one, else the
        fallback engine's for this batch."""
        if "overhead" in self.profile.terms:
            return self.overhead
        return self.fallback.framework(running, emitting)

    def driver_prep(self, requests: int, tokens: int) -> float:
        """The driver's input preparation: part of the fitted drafting where the profile has a
        draft term (its traces timed the driver's work as it ran), else the fallback engine's."""
        return 0.0 if self._draft is not None else self.fallback.driver_prep(requests, tokens)

    def draft(self, batch: int, k: int, ctx: int) -> float:
        if self._draft is None:
            return self.fallback.draft(batch, k, ctx)
        self._saw("draft", batch, k, ctx)
        return self._draft(draft_features(batch, k, ctx))

    def _chunk_seconds(self, term: Term | None, chunks: Chunks, shared_pass: bool,
                       fallback: Callable[[], float]) -> float:
        if term is None:
            return fallback()
        self._saw(term.name, chunks.tokens)
        seconds = term(prefill_features(chunks.tokens, chunks.pairs, chunks.ctx))
        return seconds - term.coef[0] if shared_pass else seconds

    def verify(self, batch: int, tokens: int, ctx: int, chunks: Chunks = NO_CHUNKS) -> float:
        if self._verify is None or (chunks.tokens and self._prefill is None):
            return self.fallback.verify(batch, tokens, ctx, chunks)
        seconds = 0.0
        if batch:
            self._saw("verify", batch, tokens, ctx)
            seconds = self._verify(verify_features(tokens, ctx))
        if chunks.tokens:
            seconds += self._chunk_seconds(self._prefill, chunks, batch > 0, lambda: 0.0)
        return seconds

    def draft_chunks(self, chunks: Chunks) -> float:
        if not chunks.tokens:
            return 0.0
        return self._chunk_seconds(self._draft_prefill, chunks, False,
                                   lambda: self.fallback.draft_chunks(chunks))

    def _message(self, term: Term | None, nbytes: int, fallback: Callable[[int], float]) -> float:
        if term is None:
            return fallback(nbytes)
        self._saw(term.name, nbytes)
        return term(message_features(nbytes))

    def comm(self, nbytes: int) -> float:
        return self._message(self._comm, nbytes, self.fallback.comm)

    def broadcast(self, nbytes: int) -> float:
        return self._message(self._broadcast, nbytes, self.fallback.broadcast)

    def reject(self, positions: int) -> float:
        if self._reject is None:
            return self.fallback.reject(positions)
        self._saw("reject", positions)
        return self._reject((1.0, positions))

    def swap(self, blocks: int) -> float:
        return self.fallback.swap(blocks)

    def warnings(self) -> list[str]:
        """What the run took from the analytic model, and where it left the fitted ranges."""
        out = []
        missing = [n for n in TERMS if n not in self.profile.terms]
        if missing:
            out.append(f"profile: no fitted {', '.join(missing)}; those costs are analytic estimates")
        out += coefficient_notes(self.profile)
        for name, term in self.profile.terms.items():
            seen = self.seen[name]
            for i, var in enumerate(RANGE_VARIABLES[name]):
                if var not in term.ranges or seen.lo[i] > seen.hi[i]:
                    continue
                lo, hi = term.ranges[var]
                if seen.lo[i] < lo or seen.hi[i] > hi:
                    out.append(f"profile: {name} {var} {_num(seen.lo[i])}-{_num(seen.hi[i])} used, "
                               f"fitted on {_num(lo)}-{_num(hi)}: extrapolated")
        return out


def coefficient_notes(profile: Profile) -> list[str]:
    """What the run takes as 0 without a measurement saying so: the coefficients of features a
    profile from an older psdsim does not list, and a term whose every coefficient is 0 (its
    samples took no time: that work is free in the run)."""
    out = []
    for name, term in profile.terms.items():
        unlisted = FEATURES[name][len(term.coef):]
        if unlisted:
            out.append(f"profile: {name} lists {len(term.coef)} of this psdsim's features (an older psdsim's "
                       f"profile); {', '.join(unlisted)} count 0")
        if not any(term.coef):
            out.append(f"profile: every {name} coefficient is 0: that work costs nothing in this run")
    return out


def _num(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 10 or x == int(x) else f"{x:.3g}"


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
