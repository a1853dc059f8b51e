"""The local process pool that plan, paper and sweep share: errors cross back from workers intact,
and a pool whose results are no longer wanted stops at once, its workers gone."""

from __future__ import annotations

import multiprocessing
import pickle
import time

import pytest

from psdsim.calibration.trace_error import TraceError
from psdsim.sim.errors import ScenarioError
from psdsim.studies.executors import run_local


def _bad_input(x: int) -> int:
    raise ScenarioError("search.rate_max", f"must be finite, got {x}", "write rate_max = 100")


def _sleep(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@pytest.mark.parametrize("error", [ScenarioError("k", "must be >= 1", "write k = 3"),
                                   TraceError("t.json", "not JSON"),
                                   TraceError("t.json", "empty", "record it")])
def test_user_errors_survive_pickling(error):
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error) and str(again) == str(error)
    assert (again.field, again.problem, again.fix) == (error.field, error.problem, error.fix)


def test_a_user_error_in_a_worker_reaches_the_caller_as_itself():
    # It used to break the pool (ScenarioError could not be unpickled) and end as WorkerDied.
    with pytest.raises(ScenarioError, match=r"search\.rate_max: must be finite"):
        list(run_local(_bad_input, [1, 2, 3], workers=2))


def test_a_pool_stopped_early_stops_its_workers_at_once():
    results = run_local(_sleep, [0.0, 60.0, 60.0], workers=2)
    assert next(results) == (0, 0.0)
    began = time.perf_counter()
    results.close()       # what Ctrl-C or an error in the caller does: the 60 s jobs are not awaited
    assert time.perf_counter() - began < 20
    deadline = time.perf_counter() + 10     # the pool's own thread may reap the last one a moment later
    while multiprocessing.active_children() and time.perf_counter() < deadline:
        time.sleep(0.05)
    assert multiprocessing.active_children() == []
    assert time.perf_counter() - began < 20
