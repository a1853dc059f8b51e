"""Running independent, deterministic simulations on several processes, results in input order."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from psdsim.studies.executors import run_local

T = TypeVar("T")
R = TypeVar("R")


def map_in_order(fn: Callable[[T], R], items: Sequence[T], workers: int = 1,
                 progress: Callable[[float], None] | None = None) -> list[R]:
    """`[fn(x) for x in items]`, on `workers` processes when > 1 (fn must be picklable: a
    module-level function); `progress` gets the fraction done after each item."""
    out: list[R | None] = [None] * len(items)
    for done, (i, result) in enumerate(run_local(fn, items, workers), 1):
        out[i] = result
        if progress is not None:
            progress(done / len(items))
    return out  # type: ignore[return-value]  # every slot is filled
