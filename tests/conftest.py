"""Shared helpers: small scenarios that simulate in milliseconds."""

from __future__ import annotations

import numpy as np
import pytest

from psdsim.sim.scenario import Scenario


def small(**changes) -> Scenario:
    """A small, fast, valid scenario (fixed prompts, short outputs)."""
    base = dict(requests=40, m=4, k=3, output_len=32, prompt_len=64, seed=1)
    base.update(changes)
    return Scenario(**base)


def decode_rows(steps: dict[str, np.ndarray]) -> np.ndarray:
    return np.flatnonzero(steps["kind"] == "decode")


@pytest.fixture
def small_scenario() -> Scenario:
    return small()
