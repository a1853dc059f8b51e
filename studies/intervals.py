"""Propagation: the draws of a scenario's uncertain inputs (sim/uncertainty.py), each a full
simulation, run side by side on the study executors (studies/parallel.py)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np

from psdsim.sim.scenario import Scenario
from psdsim.sim.uncertain_inputs import UncertainInput, uncertain_inputs
from psdsim.sim.uncertainty import Propagation, check_draws, make_draws, simulate_draw, unit_points
from psdsim.studies.parallel import map_in_order


def propagate(s: Scenario, draws: int, methods: Sequence[str] | None = None,
              inputs: Sequence[UncertainInput] | None = None, workers: int | None = None,
              progress: Callable[[float], None] | None = None) -> Propagation:
    """Simulate `draws` draws of `s`'s uncertain inputs (default: all of them) under `methods`
    (default: the scenario's own), on local worker processes (default: one per CPU)."""
    check_draws(draws)
    methods = tuple(methods or (s.method,))
    inputs = tuple(uncertain_inputs(s, methods) if inputs is None else inputs)
    points = unit_points(s, draws, len(inputs)) if inputs else np.zeros((draws, 0))
    jobs = make_draws(s, methods, inputs, points)
    summaries = map_in_order(simulate_draw, jobs, workers or os.cpu_count() or 1, progress)
    values = np.array([[inp.value(u) for inp, u in zip(inputs, row, strict=True)] for row in points])
    return Propagation(inputs, values.reshape(draws, len(inputs)), tuple(summaries))
