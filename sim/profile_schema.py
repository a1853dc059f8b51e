"""Fitted cost profiles: the schema `calibration/` writes and the simulator reads (its reading
and checks are profile_reader.py's, its pricing profile.py's).

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
its error says how good.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

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
