"""The common table every trace reader produces: one sample per timed piece of engine work.

A sample is one draft phase, one target pass (verify or prefill), one transfer, one rejection
sampling call or one step's framework overhead, with the batch facts that explain its duration.
Numbers a trace does not carry are NaN; fitting drops the features (or samples) that need them
and says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

# draft_prefill is the draft model's pass over prompt tokens (it fills the drafter's KV cache).
KINDS = ("draft", "verify", "prefill", "draft_prefill", "comm", "broadcast", "reject", "overhead")
NAN = math.nan


@dataclass(frozen=True, slots=True)
class StepSample:
    kind: str
    start_s: float            # GPU-side start (first GPU op), or the CPU range start where none
    end_s: float
    duration_s: float         # GPU busy time: the union of the GPU ops' intervals (CPU time for
    #                           overhead, the record's own timer for engine step traces)
    span_s: float             # last GPU op end - first GPU op start
    device: int = -1          # GPU the work ran on (-1 unknown; the lowest one for multi-GPU work)
    process: int = -1
    batch: float = NAN        # requests in the pass
    tokens: float = NAN       # positions computed (verify: proposals + 1 each; prefill: prompt tokens)
    k: float = NAN            # draft tokens per request
    ctx: float = NAN          # cached (context) tokens the pass reads
    pairs: float = NAN        # attention pairs of a prefill pass
    nbytes: float = NAN       # bytes moved (transfers)
    positions: float = NAN    # scored positions (rejection sampling)
    accepted: float = NAN     # draft tokens accepted
    generated: float = NAN    # tokens emitted
    mixed: bool = False       # a target pass that also carried prefill chunks
    source: str = ""          # where it came from: file and range name, for the report

    def with_attrs(self, attrs: dict[str, float]) -> StepSample:
        return replace(self, **{k: v for k, v in attrs.items() if k in ATTRIBUTES})


ATTRIBUTES = ("batch", "tokens", "k", "ctx", "pairs", "nbytes", "positions", "accepted", "generated")
COLUMNS = tuple(f.name for f in fields(StepSample))


def sample_columns(samples: list[StepSample]) -> dict[str, np.ndarray]:
    """The samples as columns (for CSV output and fitting)."""
    out: dict[str, Any] = {}
    for name in COLUMNS:
        values = [getattr(s, name) for s in samples]
        out[name] = np.array(values, dtype=object if name in ("kind", "source") else None)
    return out
