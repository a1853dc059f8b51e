"""Running independent, deterministic simulations on several processes, results in input order."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def map_in_order(fn: Callable[[T], R], items: Sequence[T], workers: int = 1,
                 progress: Callable[[float], None] | None = None) -> list[R]:
    """`[fn(x) for x in items]`, on `workers` processes when > 1 (fn must be picklable: a
    module-level function); `progress` gets the fraction done after each item."""
    if workers <= 1:
        results = (fn(x) for x in items)
        pool = None
    else:
        pool = ProcessPoolExecutor(max_workers=workers)
        results = pool.map(fn, items)
    try:
        out = []
        for i, result in enumerate(results):
            out.append(result)
            if progress is not None:
                progress((i + 1) / len(items))
        return out
    finally:
        if pool is not None:
            pool.shutdown(cancel_futures=True)
