"""A fitted profile (profile_schema.py) as the StepCost the simulator runs on.

Each term of the profile prices its kind of work. A pass that carries decodes and prefill chunks
together is priced as the decode pass plus the prefill term without its fixed part (they share
one weight read). Terms a profile lacks (a trace without transfers, say) fall back to the
analytic model; the run's warnings say which. A run that takes a term outside the ranges it was
fitted on warns too.

A transfer is priced message by message (sim/messages.py): under `transfers = "per-tensor"` each
tensor of MineDraft's broadcast and return pays comm's or broadcast's fixed part; a profile fitted
on an engine that sends one message each way (the reference engine) is meant for
`transfers = "one-message"`, which `psdsim validate` sets.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from psdsim.sim.costs import NO_CHUNKS, Chunks, OptionalCosts, StepCost, complete
from psdsim.sim.overlap import idle_factor
from psdsim.sim.profile_reader import check_coefficients
from psdsim.sim.profile_schema import (
    FEATURES,
    RANGE_VARIABLES,
    TERMS,
    Profile,
    Term,
    draft_features,
    message_features,
    prefill_features,
    verify_features,
)


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
    warnings): what-if pricing, such as adaptive k's candidates. A model-error view
    (sim/model_error.py) records through the cost it scales."""
    cost = getattr(cost, "scaled", cost)
    if not isinstance(cost, FittedCost):
        yield
        return
    cost.recording = False
    try:
        yield
    finally:
        cost.recording = True


class FittedCost(OptionalCosts):
    """A StepCost from a profile: fitted terms where the profile has them, `fallback` elsewhere."""

    def __init__(self, profile: Profile, fallback: StepCost) -> None:
        self.profile = profile
        self.fallback = complete(fallback)
        t = profile.terms
        self._draft, self._verify = t.get("draft"), t.get("verify")
        self._prefill, self._draft_prefill = t.get("prefill"), t.get("draft_prefill")
        self._comm, self._broadcast, self._reject = t.get("comm"), t.get("broadcast"), t.get("reject")
        check_coefficients(profile)
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
                    out.append(f"profile: {name} {var} {_short(seen.lo[i])}-{_short(seen.hi[i])} used, "
                               f"fitted on {_short(lo)}-{_short(hi)}: extrapolated")
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


def _short(x: float) -> str:
    return f"{x:.0f}" if abs(x) >= 10 or x == int(x) else f"{x:.3g}"
