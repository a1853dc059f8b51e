"""One module per decoding method; each provides the prefill and decode steps of the engine loop."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Protocol

import numpy as np

from sim.methods.ar import AutoRegressive
from sim.methods.common import SimContext
from sim.methods.psd import ParallelSD
from sim.methods.sd import StandardSD
from sim.scenario import Scenario


class Method(Protocol):
    uses_drafter: bool

    @staticmethod
    def running_cap(s: Scenario) -> int:
        """Cap on the running set: m, or 2m for PSD."""
        ...

    @staticmethod
    def gpus(s: Scenario) -> int:
        """GPUs the method occupies."""
        ...

    def __init__(self, ctx: SimContext) -> None: ...

    def admitted(self, ids: np.ndarray) -> None: ...

    def retired(self, ids: np.ndarray) -> None: ...

    def prefill(self, ids: np.ndarray) -> Generator[Any, Any, None]:
        """A prefill-only step for the admitted `ids`."""
        ...

    def decode(self) -> Generator[Any, Any, None]:
        """One decode step over the running set."""
        ...


METHODS: dict[str, type[Method]] = {"ar": AutoRegressive, "sd": StandardSD, "psd": ParallelSD}


def method_class(s: Scenario) -> type[Method]:
    return METHODS[s.method]
