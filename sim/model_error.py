"""The model's own error: a multiplicative factor on the predicted time of each kind of pass.

The other uncertain inputs (sim/uncertain_inputs.py) are the cost model's numbers; this one is the cost
model's form: how far a pass it prices with the right numbers still lands from the measured pass
(eager launches it prices as a fixed cost per kernel, the roofline's ridge, run-to-run drift). The
scenario fields `verify_error` and `draft_error` scale every target pass (prefill chunks and the
pass's named parts with it) and every draft-model pass (its prefill chunks too); absent, the model
is taken as it is, so a run without them is the run it always was. `--intervals` draws each one
from the range of the regime the scenario runs in (ERROR_RANGES): the engine model with CUDA
graphs, without them (the roofline too: its per-layer launch charge is an eager one), or a fitted
profile whose own traces timed that pass. No factor for the host side: no measured point times the
host's work apart from a pass (docs/measurements/interval_coverage.md).

The engine ranges are the 5th to 95th percentiles of measured / predicted over the H200 passes
(docs/measurements/h200_passes.jsonl, by role and mode; `python benchmarks/model_error_fit.py`
fits them and reports their coverage on the half of the passes each fit did not see). A profile
fitted to the user's own traces has no pass-form error left where its term covers the pass, but the
machine still drifts between runs: its range is the drift repeats of whole validations showed on
this project's machine (+-12 %, docs/measurements/validate_reference.md), not fitted to any point
the coverage benchmark counts.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from psdsim.sim.costs import NO_CHUNKS, Chunks, OptionalCosts, StepCost, VerifyParts

if TYPE_CHECKING:
    from psdsim.sim.scenario import Scenario

FIELDS_BY_PASS = {"verify_error": "verify", "draft_error": "draft"}   # field -> the profile term of its pass
GRAPHS, EAGER, PROFILE = "cuda graphs", "eager", "fitted profile"


@dataclass(frozen=True)
class ErrorRange:
    low: float
    high: float
    why: str


_FITTED = ("measured / predicted over the H200 {} {} passes, their 5th-95th percentile widened to "
           "a uniform draw's (benchmarks/model_error_fit.py)")
_DRIFT = "run-to-run drift of whole validations, +-12 % (docs/measurements/validate_reference.md)"
ERROR_RANGES: dict[tuple[str, str], ErrorRange] = {
    ("verify_error", GRAPHS): ErrorRange(0.921, 1.111, _FITTED.format("CUDA-graph", "target")),
    ("verify_error", EAGER): ErrorRange(0.546, 1.136, _FITTED.format("eager", "target")),
    ("draft_error", GRAPHS): ErrorRange(0.859, 0.962, _FITTED.format("CUDA-graph", "draft")),
    ("draft_error", EAGER): ErrorRange(0.762, 1.163, _FITTED.format("eager", "draft")),
    ("verify_error", PROFILE): ErrorRange(0.88, 1.12, _DRIFT),
    ("draft_error", PROFILE): ErrorRange(0.88, 1.12, _DRIFT),
}


def regime(field: str, fitted: frozenset[str], cuda_graphs: bool) -> str:
    """Which range `field` is drawn from: a profile's where its term prices the pass, else the
    engine's mode."""
    if FIELDS_BY_PASS[field] in fitted:
        return PROFILE
    return GRAPHS if cuda_graphs else EAGER


def error_ranges(s: Scenario, fitted: frozenset[str], cuda_graphs: bool) -> Iterator[tuple[str, ErrorRange]]:
    """Each model-error field the scenario leaves absent, with the range it is drawn from."""
    for field in FIELDS_BY_PASS:
        if getattr(s, field) is None:
            yield field, ERROR_RANGES[field, regime(field, fitted, cuda_graphs)]


class ModelError(OptionalCosts):
    """A StepCost whose target passes take `verify` times and draft passes `draft` times as long as
    `inner` prices them; every other call is `inner`'s."""

    def __init__(self, inner: StepCost, verify: float, draft: float) -> None:
        self.scaled, self.verify_factor, self.draft_factor = inner, verify, draft
        # OptionalCosts' class-level defaults would shadow the inner cost's own: copy them over
        for name in ("overhead", "contention", "extra_draft_rows", "after_idle"):
            setattr(self, name, getattr(inner, name))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.scaled, name)

    def verify(self, batch: int, tokens: int, ctx: int, chunks: Chunks = NO_CHUNKS) -> float:
        return self.scaled.verify(batch, tokens, ctx, chunks) * self.verify_factor

    def verify_parts(self, batch: int, tokens: int, chunks: Chunks = NO_CHUNKS) -> VerifyParts:
        return VerifyParts(*(v * self.verify_factor for v in self.scaled.verify_parts(batch, tokens, chunks)))

    def draft(self, batch: int, k: int, ctx: int) -> float:
        return self.scaled.draft(batch, k, ctx) * self.draft_factor

    def draft_chunks(self, chunks: Chunks) -> float:
        return self.scaled.draft_chunks(chunks) * self.draft_factor

    def framework(self, running: int, emitting: int) -> float:
        return self.scaled.framework(running, emitting)

    def driver_prep(self, requests: int, tokens: int) -> float:
        return self.scaled.driver_prep(requests, tokens)


def with_model_error(cost: StepCost, s: Scenario) -> StepCost:
    """`cost` under the scenario's model-error factors; `cost` itself when it sets none."""
    if s.verify_error is None and s.draft_error is None:
        return cost
    return ModelError(cost, 1.0 if s.verify_error is None else s.verify_error,
                      1.0 if s.draft_error is None else s.draft_error)
