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

Terms a profile lacks (a trace without transfers, say) fall back to the analytic model; the run's
warnings say which. A run that takes a term outside the ranges it was fitted on warns too.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psdsim.sim.costs import NO_CHUNKS, Chunks, StepCost
from psdsim.sim.errors import ScenarioError
from psdsim.sim.execution import driver_prep, framework
from psdsim.sim.numbers import finite
from psdsim.sim.overlap import idle_factor

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
        return json.dumps(doc, indent=2, allow_nan=False) + "\n"


def _bad(problem: str, path: str) -> ScenarioError:
    return ScenarioError("profile", f"{path}: {problem}",
                         "give a profile written by `psdsim calibrate … --out profile.json`")


def _idle_point(pt: Any) -> bool:
    return isinstance(pt, list) and len(pt) == 2 and None not in map(finite, pt) and pt[0] >= 0 and pt[1] > 0


def _term(name: str, doc: Any, path: str) -> Term:
    if name not in FEATURES:
        raise _bad(f"unknown term {name!r} (known: {', '.join(TERMS)})", path)
    if not isinstance(doc, dict):
        raise _bad(f"term {name!r} is not an object", path)
    coef = doc.get("coef")
    # A profile from an older psdsim may list fewer features (those added since count 0).
    features = doc.get("features", list(FEATURES[name]))
    if not isinstance(features, list) or not features or features != list(FEATURES[name][:len(features)]):
        raise _bad(f"term {name!r}: features {doc.get('features')} differ from this psdsim's "
                   f"{list(FEATURES[name])}", path)
    want = len(features)
    if not isinstance(coef, list) or len(coef) != want or None in map(finite, coef):
        raise _bad(f"term {name!r}: coef must be a list of {want} finite numbers "
                   f"({', '.join(features)})", path)
    ranges = doc.get("ranges", {})
    if not isinstance(ranges, dict) or not all(
            isinstance(v, list) and len(v) == 2 and None not in map(finite, v) for v in ranges.values()):
        raise _bad(f"term {name!r}: ranges must map names to [low, high]", path)
    cv = doc.get("cv_mape")
    return Term(name, tuple(float(c) for c in coef), int(doc.get("samples", 0)),
                float(doc.get("mape", math.nan)), None if cv is None else float(cv),
                {k: (float(v[0]), float(v[1])) for k, v in ranges.items()},
                dict(doc.get("dropped", {})), tuple(doc.get("fixed_features", ())))


def profile_from_json(text: str, path: str = "profile") -> Profile:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _bad(f"not JSON ({exc.msg} at line {exc.lineno})", path) from None
    if not isinstance(doc, dict) or doc.get("format") != PROFILE_FORMAT:
        raise _bad(f"not a psdsim profile (no \"format\": \"{PROFILE_FORMAT}\")", path)
    if doc.get("version") != PROFILE_VERSION:
        raise _bad(f"profile version {doc.get('version')!r}; this psdsim reads version {PROFILE_VERSION}",
                   path)
    terms = doc.get("terms")
    if not isinstance(terms, dict) or not terms:
        raise _bad("no fitted terms", path)
    contention = doc.get("contention", {})
    sides = ("draft", "verify")
    if not isinstance(contention, dict) or not all(
            (finite(contention.get(side, 1.0)) or 0.0) > 0 for side in sides):
        raise _bad("contention must map draft and verify to positive slowdown factors", path)
    idle = contention.get("after_idle", {})
    if not isinstance(idle, dict) or not all(
            isinstance(pts, list) and all(_idle_point(pt) for pt in pts) for pts in idle.values()):
        raise _bad("contention.after_idle must map draft and verify to [idle seconds >= 0, factor > 0] "
                   "points", path)
    return Profile({name: _term(name, t, path) for name, t in terms.items()},
                   dict(doc.get("source", {})), dict(doc.get("acceptance", {})),
                   tuple(doc.get("notes", ())), dict(contention))


def load_profile(path: str | Path) -> Profile:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError("profile", f"file {str(p)!r} not found",
                            "give the path of a profile written by `psdsim calibrate`") from None
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


class FittedCost:
    """A StepCost from a profile: fitted terms where the profile has them, `fallback` elsewhere."""

    def __init__(self, profile: Profile, fallback: StepCost) -> None:
        self.profile = profile
        self.fallback = fallback
        t = profile.terms
        self._draft, self._verify = t.get("draft"), t.get("verify")
        self._prefill, self._draft_prefill = t.get("prefill"), t.get("draft_prefill")
        self._comm, self._broadcast, self._reject = t.get("comm"), t.get("broadcast"), t.get("reject")
        self.overhead = max(0.0, t["overhead"].coef[0]) if "overhead" in t else fallback.overhead
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
        return framework(self.fallback, running, emitting)

    def driver_prep(self, requests: int, tokens: int) -> float:
        """The driver's input preparation: part of the fitted drafting where the profile has a
        draft term (its traces timed the driver's work as it ran), else the fallback engine's."""
        return 0.0 if self._draft is not None else driver_prep(self.fallback, requests, tokens)

    def draft(self, batch: int, k: int, ctx: int) -> float:
        if self._draft is None:
            return self.fallback.draft(batch, k, ctx)
        self._saw("draft", batch, k, ctx)
        return max(0.0, self._draft(draft_features(batch, k, ctx)))

    def _chunk_seconds(self, term: Term | None, chunks: Chunks, shared_pass: bool,
                       fallback: Callable[[], float]) -> float:
        if term is None:
            return fallback()
        self._saw(term.name, chunks.tokens)
        seconds = term(prefill_features(chunks.tokens, chunks.pairs, chunks.ctx))
        return max(0.0, seconds - term.coef[0] if shared_pass else seconds)

    def verify(self, batch: int, tokens: int, ctx: int, chunks: Chunks = NO_CHUNKS) -> float:
        if self._verify is None or (chunks.tokens and self._prefill is None):
            return self.fallback.verify(batch, tokens, ctx, chunks)
        seconds = 0.0
        if batch:
            self._saw("verify", batch, tokens, ctx)
            seconds = max(0.0, self._verify(verify_features(tokens, ctx)))
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
        return max(0.0, term(message_features(nbytes)))

    def comm(self, nbytes: int) -> float:
        return self._message(self._comm, nbytes, self.fallback.comm)

    def broadcast(self, nbytes: int) -> float:
        return self._message(self._broadcast, nbytes, self.fallback.broadcast)

    def reject(self, positions: int) -> float:
        if self._reject is None:
            return self.fallback.reject(positions)
        self._saw("reject", positions)
        return max(0.0, self._reject((1.0, positions)))

    def swap(self, blocks: int) -> float:
        return self.fallback.swap(blocks)

    def warnings(self) -> list[str]:
        """What the run took from the analytic model, and where it left the fitted ranges."""
        out = []
        missing = [n for n in TERMS if n not in self.profile.terms]
        if missing:
            out.append(f"profile: no fitted {', '.join(missing)}; those costs are analytic estimates")
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
    return out
